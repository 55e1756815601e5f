"""A tiny authoritative DNS server for lab pods (scapy's DNS layer): A records from a JSON map, NXDOMAIN otherwise.

    ip netns exec NS python -m tests.lab.dnsserver 127.0.0.53 RECORDS.json
"""

import json
import socket
import sys


def main(host: str, records_file: str) -> int:
    from scapy.layers.dns import DNS, DNSRR

    with open(records_file) as fh:
        records = {k.rstrip(".").lower(): v for k, v in json.load(fh).items()}
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((host, 53))
    while True:
        data, addr = sock.recvfrom(1500)
        try:
            q = DNS(data)
            qd = q.qd[0] if hasattr(q.qd, "__getitem__") else q.qd
            name = qd.qname.decode().rstrip(".").lower()
        except Exception:
            continue
        if name in records:
            an = DNSRR(rrname=qd.qname, type="A", ttl=30, rdata=records[name]) if qd.qtype == 1 else None
            resp = DNS(id=q.id, qr=1, aa=1, rd=q.rd, ra=1, qd=qd, an=an)
        else:
            resp = DNS(id=q.id, qr=1, aa=1, rd=q.rd, ra=1, rcode=3, qd=qd)
        sock.sendto(bytes(resp), addr)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))

"""A tiny authoritative DNS server for lab pods (scapy's DNS layer), over UDP and TCP.

    ip netns exec NS python -m tests.lab.dnsserver HOST RECORDS.json [--no-tcp] [--no-udp] [--truncate-udp]
                                                                     [--refuse] [--servfail] [--silent-tcp] [--port N]

RECORDS.json maps names to an address or a list of them (an IPv6 address is an AAAA record): A/AAAA answers for those,
NODATA for a known name asked another type, NXDOMAIN for every other name (short names included: no search path here).
``--no-tcp`` listens on UDP only (a TCP query gets a reset), ``--silent-tcp`` accepts TCP and never answers,
``--truncate-udp`` answers every UDP query with TC=1 and no records (the client must retry over TCP),
``--refuse`` / ``--servfail`` answer every query with that rcode. Each query is logged to stdout as
``TRANSPORT QNAME QTYPE RCODE``.
"""

import argparse
import json
import socket
import sys
import threading

_LOG = threading.Lock()


def _log(line: str) -> None:
    """One whole line per query: print() writes the text and its newline separately, so the UDP and TCP threads'
    lines could interleave ("tcp a 1 0tcp b 1 0")."""
    with _LOG:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def _answer(data: bytes, records: dict, args, transport: str) -> bytes | None:
    from scapy.layers.dns import DNS, DNSRR

    try:
        q = DNS(data)
        qd = q.qd[0] if hasattr(q.qd, "__getitem__") else q.qd
        name = qd.qname.decode().rstrip(".").lower()
    except Exception:
        return None
    if args.refuse or args.servfail:
        rcode = 5 if args.refuse else 2
        resp = DNS(id=q.id, qr=1, rd=q.rd, ra=1, rcode=rcode, qd=qd)
    elif transport == "udp" and args.truncate_udp:
        rcode = 0
        resp = DNS(id=q.id, qr=1, aa=1, tc=1, rd=q.rd, ra=1, qd=qd)
    elif name in records:
        rcode = 0
        addrs = records[name] if isinstance(records[name], list) else [records[name]]
        want6 = qd.qtype == 28
        an = [
            DNSRR(rrname=qd.qname, type="AAAA" if want6 else "A", ttl=30, rdata=a)
            for a in addrs
            if (":" in a) == want6 and qd.qtype in (1, 28)
        ]
        resp = DNS(id=q.id, qr=1, aa=1, rd=q.rd, ra=1, qd=qd, an=an or None)
    else:
        rcode = 3
        resp = DNS(id=q.id, qr=1, aa=1, rd=q.rd, ra=1, rcode=3, qd=qd)
    _log(f"{transport} {name} {qd.qtype} {rcode}")
    return bytes(resp)


def _serve_udp(host: str, port: int, records: dict, args) -> None:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((host, port))
    while True:
        data, addr = sock.recvfrom(65535)
        resp = _answer(data, records, args, "udp")
        if resp is not None:
            sock.sendto(resp, addr)


def _serve_tcp_conn(conn: socket.socket, records: dict, args) -> None:
    with conn:
        conn.settimeout(10)
        try:
            while True:
                head = conn.recv(2)
                if len(head) < 2:
                    return
                want = int.from_bytes(head, "big")
                data = b""
                while len(data) < want:
                    chunk = conn.recv(want - len(data))
                    if not chunk:
                        return
                    data += chunk
                if args.silent_tcp:
                    continue
                resp = _answer(data, records, args, "tcp")
                if resp is not None:
                    conn.sendall(len(resp).to_bytes(2, "big") + resp)
        except OSError:
            return


def _serve_tcp(host: str, port: int, records: dict, args) -> None:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(64)
    while True:
        conn, _ = sock.accept()
        threading.Thread(target=_serve_tcp_conn, args=(conn, records, args), daemon=True).start()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.lab.dnsserver")
    ap.add_argument("host")
    ap.add_argument("records")
    ap.add_argument("--port", type=int, default=53)
    for flag in ("--no-tcp", "--no-udp", "--truncate-udp", "--refuse", "--servfail", "--silent-tcp"):
        ap.add_argument(flag, action="store_true")
    args = ap.parse_args(argv)
    import scapy.layers.dns  # noqa: F401  (loaded before "ready": the first answer is not slowed by the import)

    with open(args.records) as fh:
        records = {k.rstrip(".").lower(): v for k, v in json.load(fh).items()}
    servers = []
    if not args.no_udp:
        servers.append(threading.Thread(target=_serve_udp, args=(args.host, args.port, records, args), daemon=True))
    if not args.no_tcp:
        servers.append(threading.Thread(target=_serve_tcp, args=(args.host, args.port, records, args), daemon=True))
    for t in servers:
        t.start()
    _log("ready")
    for t in servers:
        t.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

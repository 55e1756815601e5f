"""IPVS mode's focused read (``kpdiag node --service NS/NAME``): only the virtual servers that Service's packets meet.

What names a Service on an IPVS node: nothing. kube-proxy's virtual servers, its ipset entries (``IP,proto:port``,
no comment) and its iptables rules (a fixed set matching the ipsets) carry no Service name, so the Service's
addresses come from the API's Service (its ClusterIPs, externalIPs and load-balancer IPs at each port, and its
NodePorts at every address of this node but kube-ipvs0's, from ``ip -j addr``); without it the whole IPVS table is read, and the
manifest says why. Each of those (protocol, address, port) is asked for on its own over generic netlink
(``IPVS_CMD_GET_SERVICE``, then ``IPVS_CMD_GET_DEST`` as a dump for that virtual server only): whatever answers there —
kube-proxy's or anyone's — is what the Service's packets meet. The requests are built here from the kernel's uapi
layout (include/uapi/linux/ip_vs.h) with the standard socket module, so they work where pyroute2 has no IPVS module
(Debian 12's python3-pyroute2 0.7.2 has none); nothing is changed (only GET requests are sent).

The rest of the rules are read as before: kube-proxy's iptables rules in IPVS mode are a fixed, small set (no
per-Service chains), read chain by chain as in iptables mode (:class:`kpdiag.collect.iptables_focused.IptablesFocused`:
with no KUBE-SVC chains it reads every chain the hooks reach), and the ipsets whole (``ipset save``: 0.35 s wall,
0.2 s CPU for 32,000 entries, measured; a membership test per entry cannot cover the source-range sets, whose
``hash:ip,port,net`` entries cannot be enumerated by tests). Of kube-ipvs0, where kube-proxy binds every Service
address, only the addresses in focus and their local routes are kept (``partial.left_out`` counts the others).

A live ``kpdiag trace`` reads the same way keyed by its destination (kpdiag/collect/dest_rules.py ``DestinationIpvs``).
"""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import socket
import struct
import time

from kpdiag.bundle import sources
from kpdiag.collect.ipvs import PROTOCOLS, Dest, Service, render_list, render_save
from kpdiag.errors import NotFocused

# include/uapi/linux/netlink.h, genetlink.h
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_MULTI, NLM_F_DUMP = 0x1, 0x2, 0x300
NLA_F_NESTED = 0x8000
GENL_ID_CTRL, CTRL_CMD_GETFAMILY, CTRL_ATTR_FAMILY_ID, CTRL_ATTR_FAMILY_NAME = 0x10, 3, 1, 2
# include/uapi/linux/ip_vs.h
IPVS_GENL_NAME, IPVS_GENL_VERSION = b"IPVS", 1
IPVS_CMD_GET_SERVICE, IPVS_CMD_GET_DEST = 4, 8
IPVS_CMD_ATTR_SERVICE, IPVS_CMD_ATTR_DEST = 1, 2
SVC_AF, SVC_PROTOCOL, SVC_ADDR, SVC_PORT, SVC_FWMARK, SVC_SCHED, SVC_FLAGS, SVC_TIMEOUT = 1, 2, 3, 4, 5, 6, 7, 8
DEST_ADDR, DEST_PORT, DEST_FWD, DEST_WEIGHT, DEST_ACTIVE, DEST_INACT, DEST_PERSIST, DEST_AF = 1, 2, 3, 4, 7, 8, 9, 11
PROTO_NUMBERS = {name: num for num, name in PROTOCOLS.items()}
FWMARK = "fwmark"  # a key ("fwmark", an address of the family, mark): the virtual server of a firewall mark
MAX_VIRTUAL_SERVERS = 4096  # asked one by one; more than this is not one Service (the whole dump is read instead)
RECV_TIMEOUT = 10.0  # at most, for one answer (less when the read's deadline is nearer)
# the time for all the requests of one focused read (two per address and port): 0.9 s measured where the whole dump
# it replaces (ipvsadm -Ln of 10,000 Services) takes 4.7 s (README, "Performance"); past that the whole dump is read
IPVS_BUDGET = 10.0


class OutOfTime(Exception):
    """The requests went past the read's deadline."""


class Netlink:
    """One generic netlink socket, the IPVS family resolved (ENOENT: the kernel has no IPVS)."""

    def __init__(self, deadline: float | None = None):
        self.deadline = deadline  # time.monotonic() after which a request raises OutOfTime
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 16)  # NETLINK_GENERIC
        self.sock.settimeout(RECV_TIMEOUT)
        self.sock.bind((0, 0))
        self.seq = 0
        self.requests = 0
        try:
            (reply,) = self.request(
                GENL_ID_CTRL, CTRL_CMD_GETFAMILY, 1, [_nla(CTRL_ATTR_FAMILY_NAME, IPVS_GENL_NAME + b"\0")]
            )
        except BaseException:
            self.sock.close()
            raise
        self.family = struct.unpack("=H", reply[CTRL_ATTR_FAMILY_ID][:2])[0]

    def close(self) -> None:
        self.sock.close()

    def _left(self) -> None:
        """OutOfTime past the deadline; else wait for an answer no longer than the time left."""
        if self.deadline is None:
            return
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise OutOfTime()
        self.sock.settimeout(min(RECV_TIMEOUT, left))

    def request(self, family: int, cmd: int, version: int, attrs: list[bytes], dump: bool = False) -> list[dict]:
        """Send one request; the attributes of every answer (a dump's parts too). OSError(errno) on an error answer."""
        self._left()
        self.seq += 1
        self.requests += 1
        body = struct.pack("=BBH", cmd, version, 0) + b"".join(attrs)
        flags = NLM_F_REQUEST | (NLM_F_DUMP if dump else 0)
        self.sock.send(struct.pack("=IHHII", 16 + len(body), family, flags, self.seq, 0) + body)
        out: list[dict] = []
        while True:
            self._left()
            try:
                data = self.sock.recv(1 << 20)
            except socket.timeout:
                if self.deadline is not None and time.monotonic() >= self.deadline:
                    raise OutOfTime() from None
                raise
            off = 0
            while off + 16 <= len(data):
                length, mtype, mflags, seq, _ = struct.unpack_from("=IHHII", data, off)
                if length < 16:
                    raise OSError(errno.EPROTO, "a malformed netlink answer")
                msg = data[off + 16 : off + length]
                off += (length + 3) & ~3
                if seq != self.seq:
                    continue
                if mtype == NLMSG_ERROR:
                    code = -struct.unpack_from("=i", msg)[0]
                    if code:
                        raise OSError(code, os.strerror(code))
                    return out
                if mtype == NLMSG_DONE:
                    return out
                out.append(_attrs(msg[4:]))
                if not (mflags & NLM_F_MULTI):
                    return out


def _nla(kind: int, payload: bytes) -> bytes:
    head = struct.pack("=HH", 4 + len(payload), kind)
    return head + payload + b"\0" * ((4 - len(payload) % 4) % 4)


def _attrs(data: bytes) -> dict[int, bytes]:
    out = {}
    off = 0
    while off + 4 <= len(data):
        length, kind = struct.unpack_from("=HH", data, off)
        if length < 4:
            break
        out[kind & ~NLA_F_NESTED & 0x3FFF] = data[off + 4 : off + length]
        off += (length + 3) & ~3
    return out


def _u16(b: bytes) -> int:
    return struct.unpack("=H", b[:2])[0]


def _u32(b: bytes) -> int:
    return struct.unpack("=I", b[:4])[0]


def _addr(b: bytes, af: int) -> str:
    return str(ipaddress.IPv6Address(b[:16]) if af == socket.AF_INET6 else ipaddress.IPv4Address(b[:4]))


def _service_key(proto: str, addr: str, port: int) -> bytes:
    """The attributes that name one virtual server: (proto, address, port), or ("fwmark", an address of its family,
    the mark)."""
    ip = ipaddress.ip_address(addr)
    af = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    if proto == FWMARK:
        return _nla(
            IPVS_CMD_ATTR_SERVICE | NLA_F_NESTED,
            _nla(SVC_AF, struct.pack("=H", af)) + _nla(SVC_FWMARK, struct.pack("=I", port)),
        )
    return _nla(
        IPVS_CMD_ATTR_SERVICE | NLA_F_NESTED,
        _nla(SVC_AF, struct.pack("=H", af))
        + _nla(SVC_PROTOCOL, struct.pack("=H", PROTO_NUMBERS[proto]))
        + _nla(SVC_ADDR, ip.packed.ljust(16, b"\0"))
        + _nla(SVC_PORT, struct.pack("!H", port)),
    )


def _service(a: dict[int, bytes]) -> Service:
    af = _u16(a[SVC_AF]) if SVC_AF in a else socket.AF_INET
    bits = _u32(a[SVC_FLAGS]) if SVC_FLAGS in a else 0
    mark = _u32(a[SVC_FWMARK]) if SVC_FWMARK in a else 0
    sched = a.get(SVC_SCHED, b"wlc").split(b"\0")[0].decode("ascii", "replace")
    if mark:
        svc = Service("fwmark", None, None, mark, sched)
    else:
        proto = _u16(a[SVC_PROTOCOL]) if SVC_PROTOCOL in a else 0
        port = struct.unpack("!H", a[SVC_PORT][:2])[0] if SVC_PORT in a else 0
        svc = Service(PROTOCOLS.get(proto, str(proto)), _addr(a.get(SVC_ADDR, b"\0" * 16), af), port, None, sched)
    if bits & 0x0001:  # IP_VS_SVC_F_PERSISTENT
        svc.timeout = _u32(a[SVC_TIMEOUT]) if SVC_TIMEOUT in a else 0
    svc.onepacket = bool(bits & 0x0004)  # IP_VS_SVC_F_ONEPACKET
    return svc


def _dest(a: dict[int, bytes], af: int) -> Dest:
    from kpdiag.collect.ipvs import FWD_MASK, FWD_NAMES

    daf = _u16(a[DEST_AF]) if DEST_AF in a else af
    method = (_u32(a[DEST_FWD]) if DEST_FWD in a else 0) & FWD_MASK
    return Dest(
        _addr(a.get(DEST_ADDR, b"\0" * 16), daf),
        struct.unpack("!H", a[DEST_PORT][:2])[0] if DEST_PORT in a else 0,
        FWD_NAMES.get(method, str(method)),
        _u32(a[DEST_WEIGHT]) if DEST_WEIGHT in a else 0,
        _u32(a[DEST_ACTIVE]) if DEST_ACTIVE in a else 0,
        _u32(a[DEST_INACT]) if DEST_INACT in a else 0,
        _u32(a[DEST_PERSIST]) if DEST_PERSIST in a else 0,
    )


def get_services(keys: list[tuple[str, str, int]], budget: float = IPVS_BUDGET) -> list[Service]:
    """The virtual servers at ``keys`` ((proto, address, port)) that exist, each with its real servers, asked one by
    one (IPVS_CMD_GET_SERVICE; IPVS_CMD_GET_DEST dumps one virtual server's). A key with no virtual server is skipped.
    Raises NotFocused when the kernel cannot be asked, or when all the requests take more than ``budget`` seconds."""
    try:
        return _get_services(keys, Netlink(time.monotonic() + budget))
    except OutOfTime:
        raise NotFocused(f"IPVS over netlink: the requests took more than the focused read's {budget:g} s") from None
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise NotFocused("the kernel has no IPVS generic netlink family (ip_vs not loaded)") from None
        raise NotFocused(f"IPVS over netlink: {exc.strerror or exc}") from None


def _get_services(keys: list[tuple[str, str, int]], nl: Netlink) -> list[Service]:
    out = []
    try:
        for proto, addr, port in keys:
            key = _service_key(proto, addr, port)
            try:
                answers = nl.request(nl.family, IPVS_CMD_GET_SERVICE, IPVS_GENL_VERSION, [key])
            except OSError as exc:
                if exc.errno in (errno.ESRCH, errno.ENOENT):
                    continue  # no virtual server there
                raise NotFocused(f"IPVS_CMD_GET_SERVICE {proto} {addr}:{port}: {exc.strerror or exc}") from None
            for answer in answers:
                if IPVS_CMD_ATTR_SERVICE not in answer:
                    continue
                svc = _service(_attrs(answer[IPVS_CMD_ATTR_SERVICE]))
                af = socket.AF_INET6 if ":" in (svc.addr or "") else socket.AF_INET
                try:
                    dests = nl.request(nl.family, IPVS_CMD_GET_DEST, IPVS_GENL_VERSION, [key], dump=True)
                except OSError as exc:
                    raise NotFocused(f"IPVS_CMD_GET_DEST {proto} {addr}:{port}: {exc.strerror or exc}") from None
                svc.dests = [_dest(_attrs(d[IPVS_CMD_ATTR_DEST]), af) for d in dests if IPVS_CMD_ATTR_DEST in d]
                out.append(svc)
    except (OSError, struct.error, KeyError) as exc:  # a timeout, a malformed answer: the whole dump instead
        raise NotFocused(f"IPVS over netlink: {exc.__class__.__name__}: {exc}") from None
    finally:
        nl.close()
    return out


def catch_all(keys: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    """The catch-all virtual servers (port 0) at the addresses of ``keys``: the kernel looks one up for a packet whose
    (protocol, address, port) has none (ip_vs_ctl.c ip_vs_service_find), so a focused read asks for them too."""
    return list(dict.fromkeys((p, a, 0) for p, a, port in keys if p != FWMARK and port))


def _key_text(proto: str, addr: str, port: int) -> str:
    if proto == FWMARK:
        return f"fwmark {port:#x} (IPv{ipaddress.ip_address(addr).version})"
    return f"{proto} {addr}:{port}" if ":" not in addr else f"{proto} [{addr}]:{port}"


BOUND_LINK = "kube-ipvs0"  # where kube-proxy binds the Service addresses: not node addresses (no NodePort there)


def node_addresses(ip_addr_json: bytes | str | None) -> list[str] | None:
    """The addresses of this node's interfaces (``ip -j addr``) a NodePort can be reached at — every one but those
    kube-proxy bound on kube-ipvs0 (every ClusterIP: asking for a NodePort at each would be as many requests as the
    whole table) — or None when it was not read or does not parse."""
    if not ip_addr_json:
        return None
    try:
        links = json.loads(ip_addr_json)
    except ValueError:
        return None
    if not isinstance(links, list):
        return None
    out = []
    for link in links:
        if not isinstance(link, dict) or link.get("ifname") == BOUND_LINK:
            continue
        for a in link.get("addr_info") or []:
            local = a.get("local") if isinstance(a, dict) else None
            if isinstance(local, str) and local not in out:
                try:
                    ipaddress.ip_address(local)
                except ValueError:
                    continue
                out.append(local)
    return out


def service_keys(svc: dict, addresses: list[str] | None) -> list[tuple[str, str, int]]:
    """(proto, address, port) of every virtual server a Service's packets can meet on this node, from its API object:
    ClusterIPs, externalIPs and load-balancer ingress IPs at each port, NodePorts at each of ``addresses``. Raises
    NotFocused when they cannot be told exactly."""
    spec = svc["spec"] if isinstance(svc.get("spec"), dict) else {}
    if spec.get("type") == "ExternalName":
        raise NotFocused("an ExternalName Service has no virtual server (a DNS name only)")
    ips = _service_ips(spec, svc["status"] if isinstance(svc.get("status"), dict) else {})
    # NodePorts on the addresses of the Service's families (kube-proxy runs one proxier per family)
    families = {ipaddress.ip_address(ip).version for ip in ips}
    keys: list[tuple[str, str, int]] = []
    for p in spec.get("ports") or []:
        if not isinstance(p, dict):
            continue
        proto = str(p.get("protocol") or "TCP").lower()
        if proto not in PROTO_NUMBERS:
            raise NotFocused(f"a port of protocol {proto!r}, which IPVS does not serve")
        port = p.get("port")
        if not isinstance(port, int):
            raise NotFocused("a Service port without a number")
        keys += [(proto, ip, port) for ip in ips]
        node_port = p.get("nodePort")
        if isinstance(node_port, int) and node_port:
            if addresses is None:
                raise NotFocused(f"this node's addresses ({sources.IP_ADDR}) were not read: its NodePorts are unknown")
            keys += [
                (proto, a, node_port) for a in addresses if not families or ipaddress.ip_address(a).version in families
            ]
    if not keys:
        raise NotFocused("the Service has no address and port a virtual server could serve (headless, or no ports)")
    keys += catch_all(keys)
    if len(keys) > MAX_VIRTUAL_SERVERS:
        raise NotFocused(f"more than {MAX_VIRTUAL_SERVERS} addresses and ports to ask for")
    return list(dict.fromkeys(keys))


def _service_ips(spec: dict, status: dict) -> list[str]:
    """The Service's ClusterIPs, externalIPs and load-balancer ingress IPs; NotFocused when one is not an address."""
    ips = [ip for ip in (spec.get("clusterIPs") or [spec.get("clusterIP")]) if isinstance(ip, str) and ip != "None"]
    ips += [ip for ip in spec.get("externalIPs") or [] if isinstance(ip, str)]
    ingress = (status.get("loadBalancer") or {}).get("ingress") or []
    ips += [i["ip"] for i in ingress if isinstance(i, dict) and isinstance(i.get("ip"), str)]
    for ip in ips:
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            raise NotFocused(f"the Service names {ip!r}, not an IP address") from None
    return ips


class IpvsFocused:
    """IPVS mode: the Service's virtual servers one by one over netlink (its addresses from the API's Service, which
    ``lookup()`` returns, or None), kube-proxy's iptables chains as iptables mode reads them, the ipsets whole."""

    mode = "ipvs"
    source = sources.IPVSADM  # where a fallback to the whole read is said
    after = ("ipset",)  # whole: see the module's docstring

    def __init__(self, collector, service: str, lookup=None, iptables=None):
        self.c = collector
        self.service = service
        self.lookup = lookup
        self.iptables = iptables  # the iptables reader (iptables_focused.IptablesFocused): IPVS mode's iptables rules
        self.partial: dict = {}

    def _service_object(self) -> dict:
        if self.lookup is None:
            raise NotFocused(
                "in IPVS mode nothing on the node names a Service (virtual servers, ipset entries and kube-proxy's "
                "iptables rules carry no Service name) and the API's Service was not available"
            )
        doc, why = self.lookup()
        if doc is None:
            raise NotFocused(f"the API's Service {self.service} could not be read ({why})")
        return doc

    def keys(self) -> list[tuple[str, str, int]]:
        """The (proto, address, port) to ask for: the Service's, from the API's Service and this node's addresses."""
        return service_keys(self._service_object(), node_addresses(self.c.out.files.get(sources.IP_ADDR)))

    def what(self, asked: int, found: int) -> str:
        """What the IPVS files hold, in the manifest's words."""
        return (
            f"only the virtual servers {self.service}'s packets can meet (IPVS_CMD_GET_SERVICE and GET_DEST one by "
            f"one over netlink, at its ClusterIPs, external and load-balancer IPs and ports, and its NodePorts at "
            f"each address of this node but kube-ipvs0's: {asked} asked, {found} found)"
        )

    def collect(self) -> None:
        c = self.c
        if not os.path.exists(os.path.join(c.proc, "net", "ip_vs")):
            raise NotFocused("the ip_vs kernel module is not loaded (no /proc/net/ip_vs)")
        if self.iptables is None:
            raise NotFocused("no reader for the iptables side of IPVS mode was given")
        keys = self.keys()
        t = time.monotonic()
        services = get_services(keys)
        c._timed(f"{sources.IPVSADM} (focused)", t)
        if not self.iptables.partial:  # keys() may have read them (a destination's marks and DNAT targets)
            self.iptables.collect()
        c._put(sources.IPVSADM, render_save(services))
        c._put(sources.IPVSADM_LIST, render_list(services))
        if c.wants(sources.IPVS_TIMEOUT):
            c._run(sources.IPVS_TIMEOUT, "ipvsadm", ["-L", "--timeout"])
        what = self.what(len(keys), len(services))
        if c.wants(sources.IPVS_CONN):
            self._conn_counts(keys)
        bound = self._narrow_bound({str(ipaddress.ip_address(addr)) for proto, addr, _ in keys if proto != FWMARK})
        self.partial = {
            **{k: v for k, v in self.iptables.partial.items() if k not in ("holds", "chains", "mode")},
            "mode": self.mode,
            "holds": {
                **self.iptables_holds(),
                str(sources.IPVSADM): what,
                str(sources.IPVSADM_LIST): what,
            },
            "chains": self.iptables.partial["chains"],
            "virtual_servers": [_key_text(*k) for k in keys],
        }
        if c.wants(sources.IPVS_CONN):
            self.partial["holds"][str(sources.IPVS_CONN)] = f"the connections to {self.packets}'s virtual servers only"
        if bound:
            self.partial["holds"].update(bound)
            self.partial["left_out"] = self.left_out

    def _narrow_bound(self, keep: set[str]) -> dict[str, str]:
        """kube-ipvs0's addresses (and their local routes) narrowed to ``keep``: kube-proxy binds every Service address
        there (10,000 on a 10,000-Service node), and only those the packets in focus are sent to matter; the node's
        other interfaces and routes are kept whole. The holds of what was narrowed ({} when nothing was)."""
        c = self.c
        self.left_out: dict[str, int] = {}
        try:
            links = json.loads(c.out.files[sources.IP_ADDR])
            routes = json.loads(c.out.files[sources.IP_ROUTE])
        except (KeyError, ValueError):
            return {}  # not read, or not JSON: kept as it is (nothing left out)
        if not isinstance(links, list) or not isinstance(routes, list):
            return {}
        dropped: set = set()
        for link in links:
            if isinstance(link, dict) and link.get("ifname") == BOUND_LINK:
                infos = link.get("addr_info") or []
                link["addr_info"] = [a for a in infos if isinstance(a, dict) and a.get("local") in keep]
                dropped |= {a.get("local") for a in infos if isinstance(a, dict)} - keep
        gone = len(dropped)
        mine = [  # the kernel's local route of each address left out (any other route through kube-ipvs0 stays)
            r
            for r in routes
            if not (
                isinstance(r, dict)
                and r.get("dev") == BOUND_LINK
                and r.get("table") == "local"
                and r.get("type") == "local"
                and r.get("dst") in dropped
            )
        ]
        if not gone:
            return {}
        self.left_out = {str(sources.IP_ADDR): gone, str(sources.IP_ROUTE): len(routes) - len(mine)}
        c._put(sources.IP_ADDR, json.dumps(links, indent=1))
        c._put(sources.IP_ROUTE, json.dumps(mine, indent=1))
        return {
            str(sources.IP_ADDR): f"every interface's addresses but {BOUND_LINK}'s, of which only those {self.packets} "
            f"can be sent to ({len(keep)} asked; {gone} others left out: kube-proxy binds every Service address there)",
            str(sources.IP_ROUTE): f"every route but those of {BOUND_LINK}'s other addresses (their local routes: "
            f"{len(routes) - len(mine)} left out)",
        }

    packets = property(lambda self: self.service)

    def iptables_holds(self) -> dict[str, str]:
        return {
            k: "kube-proxy's iptables rules as iptables -t TABLE -S CHAIN lists them, one by one: each table's hook "
            "chains and every chain they jump to (IPVS mode has no per-Service chains)"
            for k in self.iptables.partial["holds"]
        }

    def _conn_counts(self, keys: list[tuple[str, str, int]]) -> None:
        """/proc/net/ip_vs_conn counted as a full run does, keeping the Service's virtual servers' connections."""
        from kpdiag.collect.ipvs import conn_counts_json

        c = self.c
        conn = os.path.join(c.proc, "net", "ip_vs_conn")
        t = time.monotonic()
        try:
            doc = json.loads(conn_counts_json(conn))
        except OSError as exc:
            c._err(sources.IPVS_CONN, f"cannot read {conn}: {exc.strerror or exc}")
            return
        mine = {(proto, str(ipaddress.ip_address(addr)), port) for proto, addr, port in keys if proto != FWMARK}
        doc["entries"] = [e for e in doc["entries"] if (e["proto"], e["vaddr"], e["vport"]) in mine]
        c._put(sources.IPVS_CONN, json.dumps(doc, indent=1))
        c._timed(sources.IPVS_CONN, t)

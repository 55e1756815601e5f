"""A focused read for one packet (a live ``kpdiag trace``): only the rules a packet to DST:PORT/PROTO can meet.

A live trace follows one packet, so it needs the hook chains of each table and the chains their rules can send
that packet to — not the whole ruleset, whose dump (``iptables-save``) takes a minute on a 10,000-Service node. The
walk is the one ``kpdiag node --service`` makes (kpdiag/collect/service_rules.py: each table's hook chains listed
with ``iptables -t TABLE -S CHAIN``, their jumps followed), keyed by the destination instead of a Service name: a
kube-proxy per-Service chain (KUBE-SVC/SVL/EXT/FW/SEP/XLB) is entered only from a rule that can match the packet —
its destination address (``-d``, an address or a prefix), port (``--dport``, a port or a range) and protocol
(``-p``) are the packet's, or absent, or negated (:func:`kpdiag.collect.iptables_focused.may_meet`, the same test
that decides which other Service's rule can take a Service's packets) — or from a per-Service chain already
entered; every other jump is followed. kube-proxy's per-Service chains are all in the nat table and are entered
before the packet is translated (PREROUTING, OUTPUT), so the destination as sent is the one to match.

nftables mode (:class:`NftDestinationFocused`) reads kube-proxy's table over netlink as ``kpdiag node --service``
does (kpdiag/collect/service_rules.py :class:`NftablesFocused`, kpdiag/collect/nft_netlink.py), walked by
:class:`DestWalk`: the base chains and every chain their rules reach, and of each named set or verdict map looked up
by the packet's destination (address, protocol, port — ``ip daddr . meta l4proto . th dport``, a NodePort map's
``meta l4proto . th dport``, ``ip daddr @cluster-ips``) only the elements whose key the packet can match, as sent or
as a ``dnat`` read on its way sends it; the chains their verdicts name are read as they are reached. A set looked up
by anything else (an affinity set, by source) is read whole; whatever the reader cannot decode exactly (an unknown
expression, a named interval set, typeof) makes it read the whole dump.

IPVS mode (:class:`DestinationIpvs`) needs no API: the destination names the virtual server, asked for over generic
netlink (kpdiag/collect/ipvs_rules.py) with those at the DNAT targets and firewall marks of the chains read.

When a chain cannot be listed, or decoded, the whole rules are read as without a destination, and the reason is
recorded as a problem of the rules' source (``iptables-save``, ``nft-ruleset.json`` or ``ipvsadm.txt``; the trace
prints it).
"""

from __future__ import annotations

import ipaddress

from kpdiag.bundle import sources
from kpdiag.collect.ipvs_rules import IpvsFocused
from kpdiag.collect.iptables_focused import (
    PER_SERVICE,
    TARGETS,
    _DEST,
    _JUMP,
    _PROTOS,
    _QUOTED,
    Destination,
    IptablesFocused,
    _tokens,
    chain_closure,
    _opt,
    jump_of,
)
from kpdiag.collect.service_rules import NftablesFocused, NftWalk, fall_back, run_reader, detect_mode
from kpdiag.errors import NotFocused
from kpdiag.parse.iptables import BUILTIN_CHAINS


def targets(lines: list[str], table: str, dest: Destination, mine: bool) -> list[str]:
    """The chains that ``lines`` (one chain's ``-S`` output) jump to and that a packet to ``dest`` can reach: every
    jump from a per-Service chain (``mine``) or to a chain that is not a per-Service one; another jump only when its
    rule can match the packet (:func:`may_meet`)."""
    out = []
    for line in lines:
        if not line.startswith("-A "):
            continue
        if not mine:  # fast path: most of KUBE-SERVICES and KUBE-NODEPORTS is other destinations' jumps
            m = _JUMP.search(line, line.rfind('"') + 1)  # after any quoted comment
            if m is not None and m.group(1).startswith(PER_SERVICE):
                d = _DEST.search(_QUOTED.sub('""', line))
                if d is not None and d.group(1) is None and not dest.dest_ok(d.group(2)):
                    continue  # another destination's chain
        toks = _tokens(line)
        target = jump_of(toks)
        if not target or target in TARGETS or target in BUILTIN_CHAINS[table]:
            continue
        if target.startswith(PER_SERVICE) and not mine:
            if not dest.may_meet(toks):
                continue  # a per-Service chain this packet cannot enter here
        out.append(target)
    return out


class DestinationFocused(IptablesFocused):
    """iptables mode: the chains a packet to ``dest`` can meet, through ``iptables -S`` (both families)."""

    def __init__(self, collector, dest: Destination):
        super().__init__(collector, "")
        self.dest = dest
        self.packets = f"a packet to {dest}"

    def _closure(self, lister, tables: list[str]) -> dict[str, dict[str, list[str]]]:
        return chain_closure(
            lister, tables, "", follow=lambda lines, table, mine: targets(lines, table, self.dest, mine)
        )

    def collect(self) -> None:
        super().collect()
        self.partial = {
            "destination": str(self.dest),
            "mode": self.mode,
            "holds": {
                source: f"only the chains {self.packets} can meet (iptables -t TABLE -S CHAIN, one by one): each "
                "table's hook chains and every chain they jump to, kube-proxy's per-Service chains only from a rule "
                "that can match that destination"
                for source in self.partial["holds"]
            },
            "chains": self.partial["chains"],
        }


MAX_MARKS = 64  # firewall marks the chains read can give a packet: past this, which fwmark virtual server it meets is
# not worth telling apart (the whole IPVS table is read)
_NFT_CHANGES = ('"dnat"', '"redirect"', '"tproxy"', '"queue"')  # nftables statements that move a packet elsewhere


def _xmark(tokens: list[str]) -> tuple[int, int] | None:
    """A MARK rule's (value, mask) as ``iptables -S`` prints it (``--set-xmark V/M``: mark = (mark & ~M) ^ V)."""
    for i, tok in enumerate(tokens[:-1]):
        if tok in ("--set-xmark", "--set-mark"):
            value, _, mask = tokens[i + 1].partition("/")
            v, m = int(value, 0), int(mask, 0) if mask else 0xFFFFFFFF
            return (v, m) if tok == "--set-xmark" else (v, m | v)  # --set-mark V/M: (mark & ~M) | V
    return None


def packet_keys(dest: Destination, rules: list[str]) -> list[tuple[str, str, int]]:
    """The virtual servers (ipvs_rules keys) a packet to ``dest`` can meet after ``rules`` (the ``-A`` lines of
    every chain it can meet, any table): the one at its destination, the one at each address a DNAT rule can send it
    to, and the fwmark virtual server of each mark the MARK rules can give it (from none, in any order). Raises
    NotFocused when a rule moves the packet somewhere that cannot be told (REDIRECT, a DNAT range, TPROXY, NETMAP)
    or restores a mark from the connection."""
    from kpdiag.collect.ipvs_rules import FWMARK, MAX_VIRTUAL_SERVERS, catch_all

    if dest.port is None:
        raise NotFocused(f"{dest} has no port: which virtual servers it meets cannot be asked one by one")
    keys = [(dest.proto, dest.text, dest.port)]
    marks = {0}
    moves = []
    for line in rules:
        if not line.startswith("-A ") or " -j " not in line:
            continue
        toks = _tokens(line)
        target = jump_of(toks)
        if target in ("REDIRECT", "TPROXY", "NETMAP") or (target == "CONNMARK" and "--restore-mark" in toks):
            raise NotFocused(f"the rule '{line}' can give the packet a destination or mark that cannot be told here")
        if target == "MARK":
            try:
                move = _xmark(toks)
            except ValueError:
                move = None
            if move is None:
                raise NotFocused(f"the rule '{line}' sets a mark kpdiag cannot read")
            moves.append(move)
        elif target == "DNAT":
            to = next((toks[i + 1] for i, t in enumerate(toks[:-1]) if t == "--to-destination"), "")
            host, port = _to_destination(to)
            if host is None:
                raise NotFocused(f"the rule '{line}' can send the packet to a range of addresses or ports")
            proto = (_opt(toks, "-p") or dest.proto).lower()
            keys.append((proto if proto in _PROTOS else dest.proto, host, port or dest.port))
    seen = 0
    while len(marks) != seen:  # the MARK rules in any order, any number of times: the closure of the marks
        seen = len(marks)
        for value, mask in moves:
            marks |= {(m & ~mask) ^ value for m in marks}
        if len(marks) > MAX_MARKS:
            raise NotFocused(f"the MARK rules on the path can give the packet more than {MAX_MARKS} marks")
    keys += [(FWMARK, dest.text, m) for m in sorted(marks) if m]
    keys += catch_all(keys)
    keys = [k for k in dict.fromkeys(keys) if ipaddress.ip_address(k[1]).version == dest.addr.version]
    if len(keys) > MAX_VIRTUAL_SERVERS:
        raise NotFocused(f"more than {MAX_VIRTUAL_SERVERS} virtual servers to ask for")
    return keys


def _to_destination(to: str) -> tuple[str | None, int | None]:
    """``--to-destination`` as one (address, port or None); (None, None) for a range or what cannot be read."""
    if to.startswith("["):
        host, _, rest = to[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif to.count(":") == 1:
        host, _, port = to.partition(":")
    else:
        host, port = to, ""
    try:
        addr = str(ipaddress.ip_address(host))
    except ValueError:
        return None, None
    if port and not port.isdigit():
        return None, None
    return addr, int(port) if port else None


class DestinationIpvs(IpvsFocused):
    """IPVS mode: the virtual servers a packet to ``dest`` can meet, asked one by one over netlink (no API: the
    destination names them), and the iptables chains it can meet (:class:`DestinationFocused`: IPVS mode has no
    per-Service chains, so every chain the hooks reach). The ipsets are read whole (``ipset save``): what the trace
    tests against them changes along the walk (the real server IPVS picks is the destination KUBE-LOOP-BACK is
    matched against, the source KUBE-LOAD-BALANCER-SOURCE-CIDR's), and entries of a ``hash:…,net`` set cannot be
    asked one by one."""

    def __init__(self, collector, dest: Destination):
        super().__init__(collector, "", iptables=DestinationFocused(collector, dest))
        self.dest = dest

    packets = property(lambda self: f"a packet to {self.dest}")

    def keys(self) -> list[tuple[str, str, int]]:
        c = self.c
        self.iptables.collect()
        family = sources.IP6TABLES_SAVE if self.dest.addr.version == 6 else sources.IPTABLES_SAVE
        text = c.out.files.get(family)
        if text is None:
            raise NotFocused(f"{family} was not read")
        nft = c.out.files.get(sources.NFT_RULESET) or b""
        moved = [s for s in _NFT_CHANGES if s.encode() in nft]
        if moved or (b'"mangle"' in nft and b'"mark"' in nft):
            raise NotFocused(
                "the node's other nftables tables can change the packet's destination or mark "
                f"({', '.join(m.strip(chr(34)) for m in moved) or 'mark set'}): which virtual servers it meets "
                "cannot be told here"
            )
        return packet_keys(self.dest, text.decode("utf-8", "replace").splitlines())

    def what(self, asked: int, found: int) -> str:
        return (
            f"only the virtual servers {self.packets} can meet (IPVS_CMD_GET_SERVICE and GET_DEST one by one over "
            f"netlink: at its destination, at each DNAT rule's on its path, and at each firewall mark its MARK rules "
            f"can give it: {asked} asked, {found} found)"
        )

    def iptables_holds(self) -> dict[str, str]:
        return self.iptables.partial["holds"]


def _key_part(expr) -> str | None:
    """What a part of a set lookup's key is, in the packet's terms: "addr" (``ip daddr``), "proto" (``meta l4proto``),
    "port" (``th dport``, ``tcp dport`` …), else None."""
    if not isinstance(expr, dict):
        return None
    if expr.get("meta", {}).get("key") == "l4proto":
        return "proto"
    payload = expr.get("payload") or {}
    if payload.get("field") == "daddr" and payload.get("protocol") in ("ip", "ip6"):
        return "addr"
    if payload.get("field") == "dport" and payload.get("protocol") in ("th", "tcp", "udp", "sctp"):
        return "port"
    return None


_FIELD_PART = {"ip4": "addr", "ip6": "addr", "proto": "proto", "port": "port"}


class DestWalk(NftWalk):
    """One kube-proxy nftables table read for one packet (:class:`NftWalk`, keyed by its destination): the elements
    of a set looked up by the packet's destination are kept when every part of their key can be the packet's — its
    address, protocol and port as sent, or as a ``dnat`` in a chain read sends it (the later hooks look their maps up
    with those). Keys are compared as the kernel's bytes, field by field."""

    def __init__(self, nl, family: str, table: str, dest: Destination, deadline: float | None = None):
        super().__init__(nl, family, table, "", deadline=deadline)
        self.dest = dest

    def _start(self) -> None:
        from kpdiag.collect.nft_netlink import PROTOS

        d = self.dest
        self.addrs = None if d.addr is None else {d.addr.packed}  # None: any
        numbers = {name: num for num, name in PROTOS.items()}
        names = ("icmp", "ipv6-icmp") if d.proto == "icmp" else (d.proto,)
        self.protos = {bytes([numbers[n]]) for n in names if n in numbers} or None
        self.ports = None if d.port is None and d.proto != "icmp" else ({d.port} - {None})
        self._want = {"ip4": self.addrs, "ip6": self.addrs, "proto": self.protos}  # the same sets, grown in place

    def _keep(self, data, i: int) -> bool:
        key, off = data.key(i), 0
        for kind, length in data.info.fields:
            part = key[off : off + length]
            want = self._want.get(kind)
            if kind == "port":
                if self.ports is not None and int.from_bytes(part[:2], "big") not in self.ports:
                    return False
            elif want is not None and (part[:1] if kind == "proto" else part) not in want:
                return False
            off += (length + 3) & ~3
        return True

    def _learn(self, kept) -> bool:
        grew = False
        for raw, port in self._dnats():
            if self.addrs is not None and raw not in self.addrs:
                self.addrs.add(raw)
                grew = True
            if port is not None and self.ports is not None and port not in self.ports:
                self.ports.add(port)
                grew = True
        return grew

    def _reducible(self, name: str, data) -> bool:
        """Only a set every rule looks up (no update) by the packet's destination, part by part of its key."""
        uses = self.used.get(name, ())
        if not uses or any("elem" in e or ("left" in e and e.get("op") not in ("==", "!=")) for e in uses):
            return False
        fields = [_FIELD_PART.get(kind) for kind, _ in data.info.fields]
        for e in uses:
            key = e.get("left") if "left" in e else e.get("key")
            parts = key["concat"] if isinstance(key, dict) and "concat" in key else [key]
            if len(parts) != len(fields) or any(_key_part(p) != f or f is None for p, f in zip(parts, fields)):
                return False
        return True


class NftDestinationFocused(NftablesFocused):
    """nftables mode: kube-proxy's table(s) over netlink as a packet to a destination meets them (:class:`DestWalk`)."""

    walk = DestWalk
    subject = "destination"
    holds = (
        "only the chains a packet to {what} can meet in kube-proxy's table (read over netlink chain by chain): its "
        "base chains and every chain they reach; its sets and verdict maps looked up by the destination with only "
        "the elements whose key the packet can match (as sent, or as a dnat on its way sends it), the others whole; "
        "the other nftables tables whole"
    )


READERS = {
    cls.mode: cls for cls in (DestinationFocused, DestinationIpvs, NftDestinationFocused)
}  # by the dataplane's name


def reads_destination(mode: str | None) -> bool:
    """Can a live trace in ``mode`` read only one destination's rules?"""
    from kpdiag.dataplane import get

    plane = get(mode)
    return plane.reads_one_service and plane.name in READERS


def focused_on(dest: Destination):
    """What :meth:`NodeCollector.collect` calls to read the rules (``rules=``): those a packet to ``dest`` can meet."""
    return lambda collector: collect_for_destination(collector, dest)


def collect_for_destination(collector, dest: Destination) -> None:
    """Read the rules a packet to ``dest`` can meet into ``collector.out``; ``collector.partial`` says what was read
    (empty when the whole rules were read: the reason is then an error of the rules' source)."""
    mode = detect_mode(collector)
    what = f"the rules a packet to {dest} can meet"
    if reads_destination(mode):
        run_reader(collector, READERS[mode](collector, dest), what)
    else:
        fall_back(
            collector,
            sources.IPTABLES_SAVE,
            f"focused read of {what} not possible (kube-proxy runs {mode} mode: a live trace reads its rules whole): "
            "the whole rules were read",
        )

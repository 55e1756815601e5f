"""A focused collection (``kpdiag node --service NS/NAME``): only the rules one Service's packets can meet.

On the nf_tables backend ``iptables-save`` of a 10,000-Service node takes a minute and more (the whole ruleset is
fetched and translated), while ``iptables -t nat -S CHAIN`` lists one chain in milliseconds. So a focused run reads
the hook chains of each table one by one and follows their jumps — every jump, except that a kube-proxy per-Service
chain (KUBE-SVC/SVL/EXT/FW/SEP/XLB) is entered only from a rule kube-proxy wrote for this Service (its comment names
it) or from a per-Service chain already entered. What it read is written in the bundle in the same format
(``iptables-save``-shaped, holding only those chains) and the manifest's ``partial`` says so and what it holds;
``analyze`` of such a bundle judges that Service only (kpdiag/state/node.py).

When a chain cannot be listed (the binary is missing, a listing fails or times out, a table is one iptables cannot
show, too many chains) the whole dump is taken instead, as without ``--service``, and the manifest says why.

One reader per proxy mode (:func:`reader`, as the mode's dataplane class says: ``READERS``). nftables mode
(:class:`NftablesFocused`) reads kube-proxy's table over netlink (kpdiag/collect/nft_netlink.py: ``nft`` itself
fetches the whole ruleset before it lists one chain): the base chains and every chain they reach, the verdict maps
reduced to the elements that can match the Service's packets (:class:`NftWalk`); an expression it cannot decode
exactly makes the whole dump be read. IPVS mode's is :class:`kpdiag.collect.ipvs_rules.IpvsFocused` (the Service's
virtual servers one by one over netlink; its addresses from the API's Service).
"""

from __future__ import annotations

import ipaddress
import os
import re
import subprocess
import threading
import time

from kpdiag.bundle import sources
from kpdiag.collect import child
from kpdiag.collect.node import CMD_TIMEOUT, SAFE_ENV, NodeCollector
from kpdiag.errors import NotFocused  # raised here and by each mode's reader (kpdiag/collect/ipvs_rules.py)
from kpdiag.parse.iptables import BUILTIN_CHAINS, TABLES

PER_SERVICE = ("KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-SEP-", "KUBE-XLB-")
MAX_CHAINS = 1000  # more than this is not one Service's path: the whole dump is cheaper to reason about
# targets that are not chains (iptables' own and its extensions): never listed
TARGETS = frozenset(
    "ACCEPT DROP RETURN REJECT QUEUE NFQUEUE DNAT SNAT MASQUERADE REDIRECT NETMAP MARK CONNMARK CT NOTRACK LOG NFLOG "
    "ULOG TRACE AUDIT CHECKSUM TCPMSS TOS DSCP TTL HL CLASSIFY IDLETIMER SECMARK CONNSECMARK SET TEE TPROXY HMARK "
    "LED RATEEST SYNPROXY CLUSTERIP ECN TCPOPTSTRIP NFCT JOURNAL".split()
)
_TOKEN_RE = re.compile(r'"((?:[^"\\]|\\.)*)"|(\S+)')


def _tokens(line: str) -> list[str]:
    return [m.group(1) if m.group(1) is not None else m.group(2) for m in _TOKEN_RE.finditer(line)]


def jump_of(tokens: list[str]) -> str | None:
    """The target of ``-j``/``-g`` in a rule's tokens, or None."""
    for i, tok in enumerate(tokens[:-1]):
        if tok in ("-j", "--jump", "-g", "--goto"):
            return tokens[i + 1]
    return None


def comment_of(tokens: list[str]) -> str:
    for i, tok in enumerate(tokens[:-1]):
        if tok == "--comment":
            return tokens[i + 1].replace('\\"', '"')
    return ""


def names_service(comment: str, service: str) -> bool:
    """Does kube-proxy's comment name ``service`` (NS/NAME)? ``ns/name:port …``, ``ns/name cluster IP`` (a port
    without a name), ``masquerade traffic for ns/name:port external destinations`` …"""
    for word in comment.replace(":", " ").split():
        if word == service:
            return True
    return False


_JUMP = re.compile(r"\s-[jg]\s+(\S+)")
PARALLEL = 8  # chain listings at a time (each is its own iptables process)


def _opt(tokens: list[str], name: str) -> str | None:
    for i, tok in enumerate(tokens[:-1]):
        if tok == name:
            return tokens[i + 1]
    return None


def _negated(tokens: list[str], name: str) -> bool:
    """Is option ``name`` negated (``! -d X``, ``-d ! X`` in old syntax)?"""
    for i, tok in enumerate(tokens[:-1]):
        if tok == name:
            return (i > 0 and tokens[i - 1] == "!") or tokens[i + 1] == "!"
    return False


def may_meet(tokens: list[str], dest_ok, port_ok, proto_ok=None) -> bool:
    """Can a rule (its tokens) match a packet whose destination address (``-d``), port (``--dport``) and protocol
    (``-p``) pass the given tests? A match the rule does not have, or negates, can always match: only a rule that
    names a destination, port or protocol the packet cannot have is ruled out. Used for "another Service's rule that
    takes this Service's packets" (:class:`ServiceWalk`) and for the one packet of a live ``kpdiag trace``
    (kpdiag/collect/dest_rules.py)."""
    for name, ok in (("-d", dest_ok), ("--dport", port_ok), ("-p", proto_ok)):
        value = _opt(tokens, name) if ok is not None else None
        if value is not None and not _negated(tokens, name) and not ok(value):
            return False
    return True


_PROTOS = {"tcp": "6", "udp": "17", "sctp": "132", "icmp": "1"}
_DEST = re.compile(r"(?:^|\s)(!\s+)?-d\s+(\S+)")
_DPORT = re.compile(r"(?:^|\s)(!\s+)?--dport\s+(\S+)")
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')


class Destination:
    """What a rule's matches can be tested against: a packet's destination address (``None``: any of the node's —
    a NodePort), port (``None``: the packet has none, as ICMP; or any, with ``any_port``) and protocol."""

    def __init__(self, addr: str | None, port: int | None, proto: str, any_port: bool = False):
        self.addr = ipaddress.ip_address(addr) if addr is not None else None
        self.text = str(self.addr)
        self.port = port
        self.proto = proto.lower()
        self.any_port = any_port and port is None
        self._nets: dict[str, bool] = {}

    def __str__(self) -> str:
        if self.addr is None:
            host = "any address"
        else:
            host = f"[{self.addr}]" if self.addr.version == 6 else str(self.addr)
        return f"{host}:{self.port}/{self.proto}" if self.port is not None else f"{host}/{self.proto}"

    def dest_ok(self, value: str) -> bool:
        """Can ``-d VALUE`` match this address? (a prefix or an address; what cannot be read can match)."""
        if self.addr is None:
            return True
        ok = self._nets.get(value)
        if ok is None and self.addr.version == 4 and (value.endswith("/32") or "/" not in value):
            # one IPv4 address, as iptables prints it (dotted quad): compared as text, without parsing 10,000 of them
            host = value[:-3] if value.endswith("/32") else value
            if host.count(".") == 3 and host.replace(".", "").isdigit():
                ok = self._nets[value] = host == self.text
        if ok is None:
            try:
                net = ipaddress.ip_network(value, strict=False)
                ok = net.version == self.addr.version and self.addr in net
            except ValueError:  # a host name, something new: the rule may match
                ok = True
            self._nets[value] = ok
        return ok

    def port_ok(self, value: str) -> bool:
        """Can ``--dport VALUE`` (a port or FIRST:LAST) match this port? A packet without a port (ICMP) cannot."""
        if self.port is None:
            return self.any_port
        first, _, last = value.partition(":")
        try:
            lo = int(first) if first else 0
            hi = int(last) if last else (65535 if _ else lo)
        except ValueError:  # a service name from /etc/services: the rule may match
            return True
        return lo <= self.port <= hi

    def proto_ok(self, value: str) -> bool:
        value = value.lower()
        return value in ("all", "0", self.proto, _PROTOS.get(self.proto, self.proto)) or value not in (
            *_PROTOS,
            *_PROTOS.values(),
        )

    def may_meet(self, tokens: list[str]) -> bool:
        return may_meet(tokens, self.dest_ok, self.port_ok, self.proto_ok)


def service_packet(tokens: list[str]) -> Destination | None:
    """The packets one of the Service's own rules (in a chain that is not a per-Service one: KUBE-SERVICES,
    KUBE-NODEPORTS, a filter chain's REJECT of a port without endpoints) is there for: its ``-d`` (none: any address of
    the node, as a NodePort's), ``--dport`` (none: any port) and ``-p``; None when it names neither an address nor a
    port (it says nothing of where the Service's packets go)."""
    d = None if _negated(tokens, "-d") else _opt(tokens, "-d")
    p = None if _negated(tokens, "--dport") else _opt(tokens, "--dport")
    if d is None and p is None:
        return None
    addr = None
    if d is not None:
        try:
            net = ipaddress.ip_network(d, strict=False)
        except ValueError:
            return None
        addr = str(net.network_address) if net.num_addresses == 1 else None  # a prefix: any address
    try:
        port = int(p) if p is not None else None
    except ValueError:  # a range or a name: any port
        port = None
    return Destination(addr, port, _opt(tokens, "-p") or "all", any_port=port is None)


class ServiceWalk:
    """Which chains one Service's packets can meet, decided as the walk goes (:func:`chain_closure`'s ``follow`` and
    ``settle``). Every jump to a chain that is not a kube-proxy per-Service one is followed, and every jump from a
    per-Service chain entered. A jump to another per-Service chain is kept aside: once every chain reachable without
    them has been read, the Service's packets are known — the addresses, ports and protocols of its own rules there
    (:func:`service_packet`) — and a kept jump is followed when its rule can match one of them (:func:`may_meet`:
    prefixes, port ranges, negations), wherever that rule is (kube-proxy's KUBE-SERVICES, a host chain): a leftover
    rule of a deleted Service, another Service's externalIP on this ClusterIP or on a node address at this NodePort,
    takes the packets first, and the trace must end where the kernel sends them."""

    def __init__(self, service: str):
        self.service = service
        self.packets: dict[tuple, Destination] = {}
        self.kept: list[tuple[str, str]] = []  # (table, line) of jumps to other Services' chains
        self._settled = (0, 0)  # (kept jumps, packets) already decided

    def follow(self, lines: list[str], table: str, mine: bool) -> list[str]:
        out = []
        for line in lines:
            if not line.startswith("-A "):
                continue
            m = _JUMP.search(line, line.rfind('"') + 1)  # after any quoted comment
            if m is None and "-j" not in line and "-g" not in line:
                continue  # no jump at all
            toks = _tokens(line) if self.service in line else None  # tokenised once, and only when it may be ours
            ours = toks is not None and names_service(comment_of(toks), self.service)
            if ours and not mine:
                packet = service_packet(toks)
                if packet is not None:
                    self.packets.setdefault((str(packet), packet.any_port), packet)
            if m is not None and m.group(1).startswith(PER_SERVICE) and not mine and not ours:
                self.kept.append((table, line))  # decided when the Service's packets are known (settle)
                continue
            target = jump_of(toks if toks is not None else _tokens(line))
            if not target or target in TARGETS or target in BUILTIN_CHAINS[table]:
                continue
            if target.startswith(PER_SERVICE) and not mine and not ours:
                self.kept.append((table, line))
                continue
            out.append(target)
        return out

    def settle(self) -> list[tuple[str, str]]:
        """The kept jumps whose rule can match one of the Service's packets: (table, chain) to read next."""
        out = []
        packets = list(self.packets.values())
        done, known = self._settled
        start = done if known == len(packets) else 0  # a new packet: every kept jump is decided again
        self._settled = (len(self.kept), len(packets))
        for table, line in self.kept[start:]:
            q = line.find('"')  # the matches outside the comment (what lies between two quoted texts is left to
            bare = line if q < 0 else line[:q] + line[line.rfind('"') + 1 :]  # the exact test below)
            d, dport = _DEST.search(bare), _DPORT.search(bare)  # (not negated) -d and --dport rule packets out
            dest = d.group(2) if d is not None and d.group(1) is None else None
            port = dport.group(2) if dport is not None and dport.group(1) is None else None
            candidates = [p for p in packets if (dest is None or p.dest_ok(dest)) and (port is None or p.port_ok(port))]
            if not candidates:
                continue
            toks = _tokens(line)
            if any(p.may_meet(toks) for p in candidates):
                target = jump_of(toks)
                if target and (table, target) not in out:
                    out.append((table, target))
        return out


def chain_closure(list_chain, tables: list[str], service: str, follow=None) -> dict[str, dict[str, list[str]]]:
    """``{table: {chain: [its -S lines]}}`` — the hook chains of ``tables`` and every chain they reach, kube-proxy's
    per-Service chains only where ``service``'s packets can enter them (:class:`ServiceWalk`). ``list_chain(table,
    chain)`` returns the ``-S`` lines or raises NotFocused. The chains of one step of the walk are listed in parallel.
    ``follow(lines, table, mine)``, when given, decides which chains a listed chain leads to instead
    (kpdiag/collect/dest_rules.py: one packet's)."""
    from concurrent.futures import ThreadPoolExecutor

    walk = ServiceWalk(service) if follow is None else None
    if walk is not None:
        follow = walk.follow

    out: dict[str, dict[str, list[str]]] = {t: {} for t in tables}
    frontier = [(t, c) for t in tables for c in BUILTIN_CHAINS[t]]
    read = 0
    with ThreadPoolExecutor(PARALLEL) as pool:
        while frontier:
            while frontier:
                read += len(frontier)
                if read > MAX_CHAINS:
                    raise NotFocused(f"more than {MAX_CHAINS} chains on the Service's path")
                listed = list(pool.map(lambda tc: list_chain(*tc), frontier))
                nxt: list[tuple[str, str]] = []
                for (table, name), lines in zip(frontier, listed):
                    out[table][name] = lines
                for (table, name), lines in zip(frontier, listed):
                    for target in follow(lines, table, name.startswith(PER_SERVICE)):
                        if target not in out[table] and (table, target) not in nxt:
                            nxt.append((table, target))
                frontier = nxt
            if walk is not None:  # every chain reachable without another Service's is read: decide those
                frontier = [(t, c) for t, c in walk.settle() if t in out and c not in out[t]]
    return out


def save_text(
    closure: dict[str, dict[str, list[str]]],
    service: str,
    binary: str,
    backend: str | None = None,
    packets: str | None = None,
) -> str:
    """The chains read, as ``iptables-save`` prints them (declarations, then rules, per table); the first line says
    how it was made (and the backend, as iptables-save's own first line does). ``packets``: whose packets (default:
    the Service's)."""
    who = packets or f"{service}'s packets"
    out = [
        f"# Generated by kpdiag: a focused read ({binary} -t TABLE -S CHAIN"
        + (f", {backend} backend" if backend else "")
        + f") of the chains {who} can meet, not the whole ruleset"
    ]
    for table in TABLES:
        chains = closure.get(table)
        if chains is None:
            continue
        out.append(f"*{table}")
        rules = []
        for name, lines in chains.items():
            policy = "-"
            for line in lines:
                if line.startswith("-P "):
                    parts = line.split()
                    policy = parts[2] if len(parts) > 2 else "ACCEPT"
                elif line.startswith("-A "):
                    rules.append(line)
            out.append(f":{name} {policy} [0:0]")
        out.extend(rules)
        out.append("COMMIT")
    out.append(f"# Completed by kpdiag ({sum(len(c) for c in closure.values())} chains)")
    return "\n".join(out) + "\n"


class ChainLister:
    """``iptables -t TABLE -S CHAIN`` through the collector's own bounds (its binary lookup, environment, timeout)."""

    def __init__(self, collector, binary: str):
        self.c = collector
        self.binary = binary
        self.argv = collector._binary(binary)
        self.calls = 0

    def __call__(self, table: str, chain: str) -> list[str]:
        if self.argv is None:
            raise NotFocused(f"{self.binary} not found")
        self.calls += 1
        try:
            proc = child.run(self.argv + ["-t", table, "-S", chain], timeout=CMD_TIMEOUT, env=SAFE_ENV)
        except subprocess.TimeoutExpired:
            raise NotFocused(f"{self.binary} -t {table} -S {chain} timed out after {CMD_TIMEOUT:.0f} s") from None
        except OSError as exc:
            raise NotFocused(f"cannot run {self.binary}: {exc.strerror or exc}") from None
        if proc.returncode != 0:
            msg = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            raise NotFocused(
                f"{self.binary} -t {table} -S {chain} exited {proc.returncode}: {msg[-1][:200] if msg else 'no message'}"
            )
        return proc.stdout.decode("utf-8", "replace").splitlines()


def netlink_tables() -> set[tuple[str, str]] | None:
    """(family, name) of every nftables table, from one netlink dump (``nft list tables`` fetches the whole ruleset
    first: a minute on a 10,000-Service node); None when netlink cannot be asked."""
    from kpdiag.collect import nft_netlink

    try:
        with nft_netlink.Netlink() as nl:
            return {(t["family"], t["name"]) for t in nl.tables()}
    except (OSError, nft_netlink.NetlinkError):  # netlink refused (no CAP_NET_ADMIN, no nf_tables): read whole
        return None


class IptablesFocused:
    """iptables mode: the Service's chains through ``iptables -S`` (both families), the rest as a full run reads it."""

    mode = "iptables"
    after = ("ipvs", "ipset")  # the rule steps still run as in a full run: small here (why there is no IPVS, …)

    def __init__(self, collector, service: str):
        self.c = collector
        self.service = service
        self.partial: dict = {}

    packets: str | None = None  # whose packets the chains are those of, when not the Service's (save_text)

    def _closure(self, lister, tables: list[str]) -> dict[str, dict[str, list[str]]]:
        """The chains to read (kpdiag/collect/dest_rules.py reads one packet's instead)."""
        return chain_closure(lister, tables, self.service)

    def _tables(self, family: int, nft_tables) -> list[str]:
        backend = self.c._iptables_backend()
        if backend == "nf_tables":
            if nft_tables is None:
                raise NotFocused("the nftables tables could not be listed over netlink")
            fam = "ip" if family == 4 else "ip6"
            return [t for t in TABLES if (fam, t) in nft_tables]
        names = os.path.join(self.c.proc, "net", "ip_tables_names" if family == 4 else "ip6_tables_names")
        try:
            with open(names) as fh:
                present = set(fh.read().split())
        except OSError:
            raise NotFocused(f"{names} is not readable") from None
        return [t for t in TABLES if t in present]

    def collect(self) -> None:
        c = self.c
        t = time.monotonic()
        backend = c._iptables_backend()
        if backend not in ("nf_tables", "legacy"):
            raise NotFocused("the iptables backend is unknown (iptables --version)")
        nft_tables = netlink_tables() if backend == "nf_tables" else None
        texts, chains_read = {}, {}
        for family, binary, source in (
            (4, "iptables", sources.IPTABLES_SAVE),
            (6, "ip6tables", sources.IP6TABLES_SAVE),
        ):
            tables = self._tables(family, nft_tables)
            if family == 6 and (not tables or c._binary(binary) is None):
                continue
            closure = self._closure(ChainLister(c, binary), tables)
            texts[source] = save_text(closure, self.service, binary, backend, self.packets)
            chains_read[str(source)] = {table: list(chains) for table, chains in closure.items()}
        default = texts[sources.IPTABLES_SAVE]
        texts[sources.IPTABLES_NFT_SAVE if backend == "nf_tables" else sources.IPTABLES_LEGACY_SAVE] = default
        self._other_backend(backend, nft_tables, texts, chains_read)
        c._timed(f"{sources.IPTABLES_SAVE} (focused)", t)
        for source, text in texts.items():
            c._put(source, text)
        self.partial = {
            "service": self.service,
            "mode": self.mode,
            "holds": {
                str(source): "only the chains this Service's packets can meet (iptables -t TABLE -S CHAIN, one by "
                "one): each table's hook chains and every chain they jump to, kube-proxy's per-Service chains "
                "(KUBE-SVC/SVL/EXT/FW/SEP) of this Service only"
                for source in texts
            },
            "chains": chains_read,
        }
        self._other_nft_tables(nft_tables)

    def _other_backend(self, backend: str, nft_tables, texts: dict, chains_read: dict) -> None:
        """The IPv4 chains of the backend ``iptables`` does not use, when the kernel has tables of it (both run on
        every packet: kube-proxy's rules may be in either), read the same way with that backend's own binary."""
        if backend == "nf_tables":
            binary, source, other = "iptables-legacy", sources.IPTABLES_LEGACY_SAVE, "legacy"
            tables = [t for t in TABLES if t in self.c.legacy_tables(4)]
        else:
            binary, source, other = "iptables-nft", sources.IPTABLES_NFT_SAVE, "nf_tables"
            present = netlink_tables() or set()
            tables = [t for t in TABLES if ("ip", t) in present]
        if not tables:
            return
        closure = self._closure(ChainLister(self.c, binary), tables)
        texts[source] = save_text(closure, self.service, binary, other, self.packets)
        chains_read[str(source)] = {table: list(chains) for table, chains in closure.items()}

    def _other_nft_tables(self, nft_tables) -> None:
        """The nftables tables that are not iptables-nft's own (a host firewall the trace also runs), each listed by
        name: ``nft list tables`` would fetch the whole ruleset first."""
        c = self.c
        if nft_tables is None:
            c.nft()  # the legacy backend: nft's tables are not iptables' (as a full run reads them)
            return
        c._run(sources.NFT_VERSION, "nft", ["--version"])
        c.nft_tables(sorted(nft_tables))


_PER_SERVICE_NFT = re.compile(r"^(?:service|local|external|endpoint|firewall|affinity)-[A-Z2-7]{8}-([^/]+/[^/]+)/")
NFT_MAX_CHAINS = 1000  # as MAX_CHAINS: more is not one Service's path
# the time for the whole netlink read of kube-proxy's tables (every chain, set and generation read): it takes 0.9 s
# on a 10,000-Service node where `nft -j list ruleset`, the whole dump it replaces, takes 10 s (README,
# "Performance"); past that it is no faster than the whole dump, which is read instead
NFT_BUDGET = 10.0
NFT_REDUCE_SETS = 256  # a plain set larger than this, looked up by destination only, keeps the addresses that matter


def nft_names_service(name: str, service: str) -> bool:
    """Is ``name`` one of kube-proxy's per-Service chains or sets of ``service`` (NS/NAME):
    ``service-HASH-NS/NAME/PROTO/PORTNAME``, ``external-…``, ``endpoint-HASH-NS/NAME/PROTO/PORT__IP/PORT``, …?"""
    m = _PER_SERVICE_NFT.match(name)
    return bool(m) and m.group(1) == service


def _uses_of(exprs: list, ref: str) -> list[dict]:
    """The expressions of a rule that look ``ref`` (@name) up or update it."""
    out = []
    for e in exprs:
        body = e.get("match") or e.get("vmap") or e.get("set") or {}
        if ref in (body.get("right"), body.get("data"), body.get("set")):
            out.append(body)
    return out


def _uses_daddr(expr) -> bool:
    left = expr.get("left") if "left" in expr else expr.get("key")
    first = left["concat"][0] if isinstance(left, dict) and "concat" in left else left
    return isinstance(first, dict) and first.get("payload", {}).get("field") == "daddr"


class NftWalk:
    """One kube-proxy nftables table read for one Service over netlink (kpdiag/collect/nft_netlink.py): its base
    chains and every chain they reach by jump/goto; the named verdict maps those rules look up reduced to the
    elements that can match the Service's packets; anonymous sets inline, as nft prints them."""

    def __init__(self, nl, family: str, table: str, service: str, deadline: float | None = None):
        from kpdiag.collect import nft_netlink

        self.nn = nft_netlink
        self.nl, self.family, self.table, self.service = nl, family, table, service
        self.deadline = time.monotonic() + NFT_BUDGET if deadline is None else deadline  # the whole walk's
        self._sets: dict[str, tuple] = {}
        self.decoder = nft_netlink.RuleDecoder(family, table, self.set)
        self.chains: dict[str, dict] = {}  # name (in this table: family and table are the walk's) → chain JSON
        self.rules: dict[str, list[dict]] = {}
        self.used: dict[str, list[dict]] = {}  # named set → the rule expressions that use it
        self.reduced: dict[str, int] = {}  # set → elements left out
        self.guards: dict[str, str] = {}  # a map keyed by protocol and port → the address set its rule checks first

    def set(self, name: str):
        if name not in self._sets:
            try:
                self._sets[name] = self.nn.read_set(self.nl, self.family, self.table, name)
            except self.nn.NetlinkError as exc:
                raise NotFocused(f"set {name} of table {self.family} {self.table}: {exc}") from None
        return self._sets[name]

    def _read(self, names: list[str], decls: dict) -> None:
        frontier = [n for n in names if n not in self.chains]
        while frontier:
            if len(self.chains) + len(frontier) > NFT_MAX_CHAINS:
                raise NotFocused(f"more than {NFT_MAX_CHAINS} chains on the Service's path")
            nxt: list[str] = []
            for name in frontier:
                if name in self.chains:
                    continue
                decl = decls.get((self.table, name)) or self.nl.chain(self.family, self.table, name)
                self.chains[name] = self.nn.chain_json(self.family, decl)
                rules = []
                for a in self.nl.rules(self.family, self.table, name):
                    rule, targets, used = self.decoder.rule(name, a)
                    rules.append(rule)
                    for s in used:
                        self.used.setdefault(s, []).extend(_uses_of(rule["rule"]["expr"], "@" + s))
                    self._guard(rule["rule"]["expr"])
                    nxt.extend(t for t in targets if t not in self.chains and t not in nxt)
                self.rules[name] = rules
            frontier = nxt

    def walk(self) -> list[dict]:
        """The table's items (table, sets and maps, chains, rules) as ``nft -j list table`` would print them, with
        only the chains and map elements the Service's packets can meet.

        A map element is kept when its verdict names one of the Service's chains or its comment names the Service
        (its own), when its key starts with an address the Service's packets can carry (its own elements' addresses,
        where its endpoint chains DNAT to, and — when it has a NodePort — the addresses of the set its NodePort rule
        checks first), or when its key is the protocol and port of one of its own (a NodePort). Keys are compared as
        the kernel's bytes: only the elements that may be kept are decoded."""
        nn = self.nn
        self.nl.deadline, self.nl.interrupted = self.deadline, False
        try:
            generation = self.nl.generation()
            tables = [t for t in self.nl.tables() if t["family"] == self.family and t["name"] == self.table]
            if tables and nn.TABLE_FLAGS in tables[0]["attrs"] and nn._be32(tables[0]["attrs"][nn.TABLE_FLAGS]) & 1:
                raise NotFocused(f"table {self.family} {self.table} is dormant")
            # (table, name): a chain of the same name in another table is not this table's (base_chains keeps the
            # table's own; the key says so where the declarations are looked up)
            decls = {
                (nn._str(a.get(nn.CHAIN_TABLE, b"")), nn._str(a.get(nn.CHAIN_NAME, b""))): a
                for a in self.nl.base_chains(self.family, self.table)
            }
            self._read([name for table, name in decls if table == self.table], decls)
            kept = self._choose(decls)
            if self.nl.interrupted or self.nl.generation() != generation:  # nft itself reads again: the whole dump
                raise NotFocused(f"table {self.family} {self.table} changed while it was read (a rule was written)")
        except nn.Undecodable as exc:
            raise NotFocused(f"table {self.family} {self.table}: {exc}") from None
        except nn.OutOfTime:
            raise NotFocused(
                f"reading table {self.family} {self.table} took more than the focused read's {NFT_BUDGET:g} s"
            ) from None
        except nn.NetlinkError as exc:
            raise NotFocused(f"table {self.family} {self.table}: netlink: {exc}") from None
        except OSError as exc:
            raise NotFocused(f"netlink: {exc.strerror or exc}") from None
        items: list[dict] = [
            {"table": {"family": self.family, "name": self.table, "handle": nn._be64(t["attrs"][nn.TABLE_HANDLE])}}
            for t in tables[:1]
            if nn.TABLE_HANDLE in t["attrs"]
        ]
        try:
            for name in sorted(self.used, key=lambda n: self.set(n).info.handle or 0):
                data = self.set(name)
                body = data.info.declaration()
                chosen = [e[0] for e in data.sorted(kept.get(name, ()))]
                if len(chosen) < len(data):
                    self.reduced[name] = len(data) - len(chosen)
                if chosen:
                    body["elem"] = chosen
                items.append({"map" if data.info.is_map else "set": body})
        except nn.Undecodable as exc:
            raise NotFocused(f"table {self.family} {self.table}: {exc}") from None
        order = sorted(self.chains, key=lambda n: self.chains[n]["chain"]["handle"] or 0)
        items.extend(self.chains[n] for n in order)
        for n in order:
            items.extend(self.rules[n])
        return items

    def _choose(self, decls: dict) -> dict[str, set[int]]:
        """The elements of each named set the walk keeps (indexes), reading the chains their verdicts send to: every
        element of a set that cannot be reduced (:meth:`_reducible`), else those :meth:`_keep` takes; what is learnt
        from the chains read (:meth:`_learn`) may take more, until nothing is added."""
        kept: dict[str, set[int]] = {}
        self._start()
        while True:
            grew = False
            for name in list(self.used):
                data = self.set(name)
                mine = kept.setdefault(name, set())
                whole = not self._reducible(name, data)
                for i in range(len(data)):
                    if i in mine or not (whole or self._keep(data, i)):
                        continue
                    mine.add(i)
                    grew = True
                    _elem, _sort, verdict, _comment = data.elem(i)
                    target = ((verdict or {}).get("goto") or (verdict or {}).get("jump") or {}).get("target")
                    if target is not None and target not in self.chains:
                        self._read([target], decls)
            if not (self._learn(kept) or grew):
                break
        return kept

    def _start(self) -> None:
        self._needle = self.service.encode()
        self.addrs: set[bytes] = set()  # addresses the Service's packets carry, as the kernel's bytes
        self.ports: set[bytes] = set()  # protocol . port keys of its own elements, as the kernel's bytes

    def _keep(self, data, i: int) -> bool:
        """Is element ``i`` the Service's own (its verdict names one of its chains, its comment names it), or keyed by
        an address or a protocol and port its packets carry?"""
        key = data.key(i)
        width = self._addr_width(data.info)
        own = False
        if self._needle in data.raw[i]:  # the Service's name is in the element: decode it to be sure
            _elem, _sort, verdict, comment = data.elem(i)
            target = (verdict or {}).get("goto") or (verdict or {}).get("jump") or {}
            own = nft_names_service(target.get("target", ""), self.service) or (
                comment is not None and names_service(comment, self.service)
            )
        if own and data.info.is_map:
            if width:
                self.addrs.add(key[:width])
            self.ports.add(key[((width + 3) & ~3) :] if width else key)
        return own or (key[:width] in self.addrs if width else key in self.ports)

    def _dnats(self) -> list[tuple[bytes, int | None]]:
        """(address as the kernel's bytes, port or None) of every ``dnat to`` of the chains read: where the packets
        they take are sent (the later hooks look their maps up with that address)."""
        out = []
        for rules in self.rules.values():
            for r in rules:
                for e in r["rule"]["expr"]:
                    d = e.get("dnat")
                    if d and isinstance(d.get("addr"), str):
                        out.append((ipaddress.ip_address(d["addr"]).packed, d.get("port")))
        return out

    def _learn(self, kept: dict[str, set[int]]) -> bool:
        """Addresses the Service's packets carry, learnt from what is read: where its endpoint chains DNAT to, and
        the addresses of the set its NodePort rule checks first. True when one was new."""
        grew = False
        for raw, _port in self._dnats():
            if raw not in self.addrs:
                self.addrs.add(raw)
                grew = True
        for vmap, guard in self.guards.items():  # NodePort packets: their destination is in the guard set
            if vmap in kept and guard in self._sets and any(self.set(vmap).key(i) in self.ports for i in kept[vmap]):
                g = self.set(guard)
                width = self._addr_width(g.info)
                for i in range(len(g)) if width else ():
                    if g.key(i)[:width] not in self.addrs:
                        self.addrs.add(g.key(i)[:width])
                        grew = True
        return grew

    @staticmethod
    def _addr_width(info) -> int:
        """Bytes of the address a set's key starts with (0: the key starts with no address)."""
        kind, length = info.fields[0]
        return length if kind in ("ip4", "ip6") else 0

    def _guard(self, exprs: list) -> None:
        """``ip daddr @S … vmap @M`` with M keyed by protocol and port (NodePorts): M's packets go to an address
        in S."""
        guard = None
        for e in exprs:
            m = e.get("match")
            if m and m.get("op") == "==" and _uses_daddr(m) and str(m.get("right", "")).startswith("@"):
                guard = m["right"][1:]
            v = e.get("vmap")
            if v and guard and isinstance(v.get("data"), str) and not _uses_daddr(v):
                self.guards[v["data"][1:]] = guard

    def _reducible(self, name: str, data) -> bool:
        """May this set's elements be reduced to those of the Service? Only when every rule that uses it looks it up
        (no update) by what the Service's packets carry: a verdict map or a large plain set keyed by destination
        address first, or a verdict map keyed by protocol and destination port (NodePorts, after the rule's check of
        the node's addresses). A set keyed by a source address (affinity) or anything else is kept whole."""
        info = data.info
        uses = self.used.get(name, ())
        if not uses or any("op" in e and e.get("op") not in ("==", "!=") for e in uses if "left" in e):
            return False
        if any("elem" in e for e in uses):  # a set statement (update @set)
            return False
        if self._addr_width(info) and all(_uses_daddr(e) for e in uses):
            return info.is_map or len(data) > NFT_REDUCE_SETS
        return info.is_map and all(_proto_dport(e.get("key")) for e in uses)


def _proto_dport(key) -> bool:
    """Is a lookup key ``meta l4proto . th dport`` (or tcp/udp/sctp dport)?"""
    parts = key.get("concat") if isinstance(key, dict) else None
    return (
        isinstance(parts, list)
        and len(parts) == 2
        and parts[0] == {"meta": {"key": "l4proto"}}
        and isinstance(parts[1], dict)
        and parts[1].get("payload", {}).get("field") == "dport"
    )


_NFT_MOVES = frozenset(("dnat", "redirect", "tproxy"))  # statements that give a packet another destination


def _moves(items: list[dict]) -> str:
    """The statements of ``items`` (``nft -j`` items of other tables) that can give a packet another destination, as
    'table: statement, …' ('' when none)."""
    found = []
    for item in items:
        rule = item.get("rule") if isinstance(item, dict) else None
        if not isinstance(rule, dict):
            continue
        stack, words = [rule.get("expr")], set()
        while stack:  # statements are keys (a jump to a chain named "dnat" is not one)
            x = stack.pop()
            if isinstance(x, dict):
                words |= _NFT_MOVES & x.keys()
                stack.extend(x.values())
            elif isinstance(x, list):
                stack.extend(x)
        found += [f"{rule.get('family')} {rule.get('table')}: {w}" for w in sorted(words)]
    return ", ".join(dict.fromkeys(found))


_IPTABLES_MOVES = re.compile(rb"^-A (\S+) .*-j (DNAT|REDIRECT|NETMAP|TPROXY)\b", re.M)


def _iptables_moves(dumps) -> str:
    """The targets of iptables-save ``dumps`` (bytes or None) that can give a packet another destination, as
    'CHAIN: TARGET, …' ('' when none)."""
    found = [f"{m[1].decode()}: {m[2].decode()}" for data in dumps if data for m in _IPTABLES_MOVES.finditer(data)]
    return ", ".join(list(dict.fromkeys(found))[:3]) + (", …" if len(set(found)) > 3 else "")


class NftablesFocused:
    """nftables mode: kube-proxy's table(s) read over netlink for one Service (:class:`NftWalk`), iptables and the
    other nftables tables as a full run reads them."""

    mode = "nftables"
    source = sources.NFT_RULESET  # where a fallback is reported
    after = ("ipvs", "ipset")

    def __init__(self, collector, what):
        self.c = collector
        self.what = what  # the Service (NS/NAME), or what the walk is keyed by
        self.partial: dict = {}

    def collect(self) -> None:
        import json

        from kpdiag.collect import nft_netlink

        c = self.c
        t = time.monotonic()
        tables = netlink_tables()
        if tables is None:
            raise NotFocused("the nftables tables could not be listed over netlink")
        mine = [(f, n) for f, n in sorted(tables) if n == "kube-proxy" and f in ("ip", "ip6")]
        if not mine:
            raise NotFocused("no kube-proxy table (ip or ip6) in nftables")
        items: list[dict] = []
        chains_read: dict[str, list[str]] = {}
        reduced: dict[str, dict[str, int]] = {}
        # iptables (its own processes, and the kernel's time for them) runs while the kernel is asked for the table
        iptables = threading.Thread(target=self._iptables, name="kpdiag-iptables", daemon=True)
        iptables.start()
        deadline = time.monotonic() + NFT_BUDGET  # one for every table walked
        try:
            with nft_netlink.Netlink() as nl:
                for family, name in mine:
                    w = self.walk(nl, family, name, self.what, deadline=deadline)
                    items.extend(w.walk())
                    chains_read[f"{family} {name}"] = list(w.chains)
                    if w.reduced:
                        reduced[f"{family} {name}"] = w.reduced
        except OSError as exc:
            raise NotFocused(f"netlink: {exc.strerror or exc}") from None
        finally:
            iptables.join()
        moves = _iptables_moves(c.out.files.get(rel) for rel in (sources.IPTABLES_SAVE, sources.IP6TABLES_SAVE))
        if moves:  # the kernel runs iptables' nat rules at the same hooks: kube-proxy's maps then see their address
            raise NotFocused(
                f"iptables rules can change the packet's destination ({moves}): which of kube-proxy's map elements "
                "it meets cannot be told from its destination"
            )
        c._timed(f"{sources.NFT_RULESET} (focused)", t)
        c._run(sources.NFT_VERSION, "nft", ["--version"])
        others = [tn for tn in sorted(tables) if tn not in mine]
        if others:
            c.nft_tables(others)  # a host firewall's tables, whole (and iptables-nft's own left out, as a full run)
            other = json.loads(c.out.files.pop(sources.NFT_RULESET, b'{"nftables": []}') or b'{"nftables": []}')
            other_items = [i for i in other.get("nftables", []) if "metainfo" not in i]
            moves = _moves(other_items)
            if moves:  # kube-proxy's maps are then looked up by an address the walk did not key them by
                raise NotFocused(
                    f"another nftables table can change the packet's destination ({moves}): which of kube-proxy's "
                    "map elements it meets cannot be told from its destination"
                )
            items.extend(other_items)
        c._put(sources.NFT_RULESET, json.dumps({"nftables": items}))
        self.partial = {
            self.subject: str(self.what),
            "mode": self.mode,
            "holds": {str(sources.NFT_RULESET): self.holds.format(what=self.what)},
            "chains": {str(sources.NFT_RULESET): chains_read},
        }
        if reduced:
            self.partial["elements_left_out"] = {str(sources.NFT_RULESET): reduced}

    done = ()  # the rule steps already run when the focused read gave up (the fallback does not run them again)
    # the walk of each kube-proxy table (``walk(nl, family, table, what, deadline=…)``), whose rules the read holds
    # (the key in the manifest's ``partial``) and what it holds; kpdiag/collect/dest_rules.py reads one packet's
    walk = NftWalk
    subject = "service"
    holds = (
        "only the chains this Service's packets can meet in kube-proxy's table (read over netlink chain by chain): its "
        "base chains and every chain they jump to; its verdict maps with only the elements of this Service and of "
        "others with the same addresses or ports; the other nftables tables whole"
    )

    def _iptables(self) -> None:
        try:
            self.c.iptables()
        except Exception as exc:  # as NodeCollector.collect does for a step: a collector bug must not stop the others
            self.c._err(sources.IPTABLES_SAVE, f"internal error: {exc.__class__.__name__}: {exc}")
        self.done = ("iptables",)


class WholeRules:
    """A mode without a focused reader yet: its rules are read whole, as a full run does (the bundle is not partial)."""

    after = ()

    def __init__(self, collector, service: str, mode: str):
        self.c = collector
        self.service = service
        self.mode = mode
        self.partial: dict = {}

    def collect(self) -> None:
        for step in RULE_STEPS:
            getattr(self.c, step)()


RULE_STEPS = NodeCollector.RULE_STEPS
READERS = {cls.mode: cls for cls in (IptablesFocused, NftablesFocused)}  # by the dataplane class's name


def reader(mode: str, collector, service: str, lookup=None):
    """The reader of ``mode``'s rules: one Service's where its dataplane class says it can (``reads_one_service``),
    else the whole rules, as a full run reads them. ``lookup()``: the API's Service (object, why not) — IPVS mode
    needs it (kpdiag/collect/ipvs_rules.py: nothing on an IPVS node names a Service)."""
    from kpdiag.dataplane import get

    plane = get(mode)
    if plane.reads_one_service and plane.services_in_ipvs:  # kpdiag/collect/ipvs_rules.py imports nothing from here
        from kpdiag.collect.ipvs_rules import IpvsFocused

        return IpvsFocused(collector, service, lookup, iptables=IptablesFocused(collector, service))
    if plane.reads_one_service:
        return READERS[plane.name](collector, service)
    return WholeRules(collector, service, mode)


def _kube_proxy_mode(mode: str | None) -> bool:
    from kpdiag.dataplane import get

    plane = get(mode)
    return plane.known and plane.kube_proxy and plane.removed is None


def detect_mode(collector) -> str:
    """The proxy mode, from what is already collected (kube-proxy's verified /proxyMode, its configuration), else from
    what is cheap to look at: kube-proxy's nftables table, then IPVS; iptables otherwise."""
    from kpdiag.bundle.store import Bundle
    from kpdiag.state.node import NodeState

    state = NodeState(Bundle.from_files("node", dict(collector.out.files)))
    mode, how = state.proxy_mode
    if _kube_proxy_mode(mode) and not how.endswith("(no mode set: the default)"):
        return mode
    tables = netlink_tables() or set()
    if any(name == "kube-proxy" for _, name in tables):
        return "nftables"
    if os.path.exists(os.path.join(collector.proc, "net", "ip_vs")) and collector._binary("iptables"):
        try:
            ChainLister(collector, "iptables")("nat", "KUBE-LOAD-BALANCER")
            return "ipvs"
        except NotFocused:
            pass
    return mode if _kube_proxy_mode(mode) else "iptables"


def focused_rules(service: str, lookup=None):
    """What :meth:`NodeCollector.collect` calls to read the rules (``rules=``): those ``service`` can meet;
    ``lookup()`` returns the API's Service as (object or None, why not), for the modes that need it."""
    return lambda collector: collect_focused(collector, service, lookup)


def collect_focused(collector, service: str, lookup=None) -> None:
    """Read the rules ``service`` (NS/NAME) can meet into ``collector.out``; the manifest's ``partial`` is set on
    the collector (``collector.partial``) when the bundle does not hold the whole ruleset."""
    mode = detect_mode(collector)
    run_reader(collector, reader(mode, collector, service, lookup), f"{service}'s rules")


def run_reader(collector, rules, what: str) -> None:
    """Read the rules with ``rules`` (a mode's focused reader); when it cannot (NotFocused), read them whole as a full
    run does, the reason an error of the reader's source (``focused read of WHAT not possible (…)``)."""
    try:
        rules.collect()
    except NotFocused as exc:
        fall_back(
            collector,
            getattr(rules, "source", sources.IPTABLES_SAVE),
            f"focused read of {what} not possible ({exc}): the whole rules were read",
            done=getattr(rules, "done", ()),
        )
        return
    for step in rules.after:
        getattr(collector, step)()
    collector.partial = rules.partial


def fall_back(collector, source, why: str, done=()) -> None:
    """The whole rules, read as a full run reads them (but the steps ``done``), ``why`` an error of ``source``."""
    collector._err(source, why)
    for step in RULE_STEPS:
        collector.out.files.pop("node/.nft-table", None)
        if step not in done:
            getattr(collector, step)()

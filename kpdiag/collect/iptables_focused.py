"""The focused read of iptables rules (iptables and IPVS mode): each table's hook chains listed one by one
(``iptables -t TABLE -S CHAIN``, :class:`ChainLister`) and their jumps followed, kube-proxy's per-Service chains only
from a rule that names the Service (:class:`ServiceWalk`, :func:`chain_closure`), written back in ``iptables-save``'s
format (:func:`save_text`); the packets a Service's rules can meet (:class:`Destination`, :func:`may_meet`)."""

from __future__ import annotations

import ipaddress
import os
import re
import subprocess
import time

from kpdiag.bundle import sources
from kpdiag.collect import child
from kpdiag.collect.node_base import CMD_TIMEOUT, SAFE_ENV
from kpdiag.errors import NotFocused
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
            if ours and not mine and toks is not None:
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

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

One reader per proxy mode (:func:`reader`, as the mode's dataplane class says): IPVS mode's is
:class:`kpdiag.collect.ipvs_rules.IpvsFocused` (the Service's virtual servers one by one over netlink; its addresses
from the API's Service). nftables mode reads its rules whole for now (``nft -j list``): :class:`WholeRules`.
"""

from __future__ import annotations

import os
import re
import subprocess
import time

from kpdiag.bundle import sources
from kpdiag.collect.node import CMD_TIMEOUT, DUMP_TIMEOUT, SAFE_ENV, NodeCollector
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


def _targets(lines: list[str], table: str, service: str, mine: bool) -> list[str]:
    """The chains that ``lines`` (one chain's ``-S`` output) jump to and that the Service's packets can reach.

    Another Service's chain is left out only when its rule cannot match this Service's packets: a rule whose
    destination is one of the addresses this Service's own rules in the chain match (``-d``), or that names no
    destination, and whose port (``--dport``) is absent or one of this Service's, is followed too — a leftover rule of
    a deleted Service, or an externalIPs hijack of this ClusterIP, takes the packets first."""
    dests: set[str] = set()
    ports: set[str] = set()
    if not mine:
        for line in lines:
            if line.startswith("-A ") and service in line:
                toks = _tokens(line)
                if names_service(comment_of(toks), service):
                    d, p = _opt(toks, "-d"), _opt(toks, "--dport")
                    if d:
                        dests.add(d)
                    if p:
                        ports.add(p)
    out = []
    for line in lines:
        if not line.startswith("-A "):
            continue
        overlap = False
        if not mine and service not in line:  # fast path: most of KUBE-SERVICES is other Services' jumps
            m = _JUMP.search(line, line.rfind('"') + 1)  # after any quoted comment
            if m is None and "-j" not in line and "-g" not in line:
                continue  # no jump at all
            if m is not None and m.group(1).startswith(PER_SERVICE):
                if " -d " in line and not any(f" -d {d} " in line for d in dests):
                    continue  # another Service's chain, for another destination
                overlap = True
        toks = _tokens(line)
        target = jump_of(toks)
        if not target or target in TARGETS or target in BUILTIN_CHAINS[table]:
            continue
        if target.startswith(PER_SERVICE) and not mine and not names_service(comment_of(toks), service):
            d, p = _opt(toks, "-d"), _opt(toks, "--dport")
            overlap = (d is None or d in dests) and (p is None or p in ports)
            if not overlap:
                continue  # another Service's chain, which this Service's packets cannot meet
        out.append(target)
    return out


def chain_closure(list_chain, tables: list[str], service: str) -> dict[str, dict[str, list[str]]]:
    """``{table: {chain: [its -S lines]}}`` — the hook chains of ``tables`` and every chain they reach, kube-proxy's
    per-Service chains only for ``service``. ``list_chain(table, chain)`` returns the ``-S`` lines or raises
    NotFocused. The chains of one step of the walk are listed in parallel."""
    from concurrent.futures import ThreadPoolExecutor

    out: dict[str, dict[str, list[str]]] = {t: {} for t in tables}
    frontier = [(t, c) for t in tables for c in BUILTIN_CHAINS[t]]
    read = 0
    with ThreadPoolExecutor(PARALLEL) as pool:
        while frontier:
            read += len(frontier)
            if read > MAX_CHAINS:
                raise NotFocused(f"more than {MAX_CHAINS} chains on the Service's path")
            listed = list(pool.map(lambda tc: list_chain(*tc), frontier))
            nxt: list[tuple[str, str]] = []
            for (table, name), lines in zip(frontier, listed):
                out[table][name] = lines
            for (table, name), lines in zip(frontier, listed):
                for target in _targets(lines, table, service, name.startswith(PER_SERVICE)):
                    if target not in out[table] and (table, target) not in nxt:
                        nxt.append((table, target))
            frontier = nxt
    return out


def save_text(closure: dict[str, dict[str, list[str]]], service: str, binary: str, backend: str | None = None) -> str:
    """The chains read, as ``iptables-save`` prints them (declarations, then rules, per table); the first line says
    how it was made (and the backend, as iptables-save's own first line does)."""
    out = [
        f"# Generated by kpdiag: a focused read ({binary} -t TABLE -S CHAIN"
        + (f", {backend} backend" if backend else "")
        + f") of the chains {service}'s packets can meet, not the whole ruleset"
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
            proc = subprocess.run(
                self.argv + ["-t", table, "-S", chain],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=CMD_TIMEOUT,
                env=SAFE_ENV,
                check=False,
            )
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
    try:
        from pyroute2.nftables.main import NFTables

        with NFTables(nfgen_family=0) as nft:  # every family (the default asks for ip only)
            tables = nft.get_tables()
        return {
            (
                {2: "ip", 10: "ip6", 1: "inet", 3: "arp", 7: "bridge", 5: "netdev"}.get(t["nfgen_family"], "?"),
                t.get_attr("NFTA_TABLE_NAME"),
            )
            for t in tables
        }
    except Exception:  # pyroute2 missing, netlink refused: the caller says so and reads whole
        return None


class IptablesFocused:
    """iptables mode: the Service's chains through ``iptables -S`` (both families), the rest as a full run reads it."""

    mode = "iptables"
    after = ("ipvs", "ipset")  # the rule steps still run as in a full run: small here (why there is no IPVS, …)

    def __init__(self, collector, service: str):
        self.c = collector
        self.service = service
        self.partial: dict = {}

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
            closure = chain_closure(ChainLister(c, binary), tables, self.service)
            texts[source] = save_text(closure, self.service, binary, backend)
            chains_read[str(source)] = {table: list(chains) for table, chains in closure.items()}
        c._timed(f"{sources.IPTABLES_SAVE} (focused)", t)
        for source, text in texts.items():
            c._put(source, text)
        default = texts[sources.IPTABLES_SAVE]
        if backend == "nf_tables":
            c._put(sources.IPTABLES_NFT_SAVE, default)
            if os.path.exists(os.path.join(c.proc, "net", "ip_tables_names")) and c._binary("iptables-legacy-save"):
                c._run(sources.IPTABLES_LEGACY_SAVE, "iptables-legacy-save", [], timeout=DUMP_TIMEOUT)
        else:
            c._put(sources.IPTABLES_LEGACY_SAVE, default)
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

    def _other_nft_tables(self, nft_tables) -> None:
        """The nftables tables that are not iptables-nft's own (a host firewall the trace also runs), each listed by
        name: ``nft list tables`` would fetch the whole ruleset first."""
        c = self.c
        if nft_tables is None:
            c.nft()  # the legacy backend: nft's tables are not iptables' (as a full run reads them)
            return
        c._run(sources.NFT_VERSION, "nft", ["--version"])
        c.nft_tables(sorted(nft_tables))


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


def reader(mode: str, collector, service: str, lookup=None):
    """The reader of ``mode``'s rules: one Service's where its dataplane class says it can (``reads_one_service``),
    else the whole rules, as a full run reads them. ``lookup()``: the API's Service (object, why not) — IPVS mode
    needs it (kpdiag/collect/ipvs_rules.py: nothing on an IPVS node names a Service)."""
    from kpdiag.dataplane import get

    plane = get(mode)
    if plane.reads_one_service and plane.services_in_ipvs:
        from kpdiag.collect.ipvs_rules import IpvsFocused

        return IpvsFocused(collector, service, lookup, iptables=IptablesFocused(collector, service))
    if plane.reads_one_service:
        return IptablesFocused(collector, service)
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
    rules = reader(mode, collector, service, lookup)
    try:
        rules.collect()
    except NotFocused as exc:
        collector._err(
            getattr(rules, "source", sources.IPTABLES_SAVE),
            f"focused read of {service}'s rules not possible ({exc}): the whole rules were read",
        )
        for step in RULE_STEPS:
            collector.out.files.pop("node/.nft-table", None)
            getattr(collector, step)()
        return
    for step in rules.after:
        getattr(collector, step)()
    collector.partial = rules.partial

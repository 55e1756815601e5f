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

import builtins
import ipaddress
import os
import re
import threading
import time
from typing import Any

from kpdiag.bundle import sources
from kpdiag.collect.iptables_focused import ChainLister, IptablesFocused, names_service, netlink_tables
from kpdiag.collect.node import NodeCollector
from kpdiag.errors import NotFocused  # raised here and by each mode's reader (kpdiag/collect/ipvs_rules.py)

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
    return m is not None and m.group(1) == service


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
        from kpdiag.collect import nft_netlink, nft_rules

        self.nn = nft_netlink
        self.nl, self.family, self.table, self.service = nl, family, table, service
        self.deadline = time.monotonic() + NFT_BUDGET if deadline is None else deadline  # the whole walk's
        self._sets: dict[str, Any] = {}  # name → nft_netlink.SetData
        self.decoder = nft_rules.RuleDecoder(family, table, self.set)
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

    def _choose(self, decls: dict) -> dict[str, builtins.set[int]]:
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

    def _learn(self, kept: dict[str, builtins.set[int]]) -> bool:
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
        stack, words = [rule.get("expr")], set[str]()
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

    done: tuple[
        str, ...
    ] = ()  # the rule steps already run when the focused read gave up (the fallback does not run them again)
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
    if mode is not None and _kube_proxy_mode(mode) and not how.endswith("(no mode set: the default)"):
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
    return mode if mode is not None and _kube_proxy_mode(mode) else "iptables"


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

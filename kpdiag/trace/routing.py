"""The routing decision: is a destination local, and if not, which device and gateway take it.

Built from ``ip -j addr`` / ``ip -j route show table all`` (bundle) or from a list of local
addresses (``--local-ip``). Longest-prefix match in the local table, then the main table — or, when the node's
policy-routing rules are known (``ip -j rule``) and it has rules of its own, the kernel's walk: rules by priority,
each rule whose selectors match looks up its table (or blackholes, rejects) and the first route found wins. A
selector kpdiag cannot evaluate for the packet (a uid range, a mark the trace does not know) makes the answer
uncertain, named, never silently ignored.

A route whose device has no carrier (``ip addr``: NO-CARRIER, state DOWN; ``ip route``: linkdown) is still chosen by
the kernel unless net.ipv4.conf.{all,DEV}.ignore_routes_with_linkdown is 1 (then the lookup goes on to the next,
shorter route); chosen, it transmits nothing (the device's queue drops every packet): neighbour resolution fails and
the kernel answers ICMP host unreachable after about 3 s (verified in tests/lab/test_linkdown_oracle.py). A route
flagged ``dead`` is never used.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..parse.addr import Prefix, parse_ip, parse_prefix

if TYPE_CHECKING:
    from ..parse.node import IpRule

_LOOPBACK = parse_prefix("127.0.0.0/8")


def _length(prefix: Prefix) -> int:
    return prefix.mask.bit_count()


NO_ROUTE = "(no route)"  # the prefix of the answer when no route covers the address (the kernel: ENETUNREACH)


@dataclass(frozen=True)
class Route:
    type: str  # local | unicast | blackhole | unreachable | prohibit | throw | unknown
    dev: str | None = None
    gateway: str | None = None
    dst: str | None = None  # the route's prefix as text ("default" for 0/0)
    table: str = "main"
    rule: str | None = None  # the policy-routing rule that chose this route, when it is not the plain main lookup
    uncertain: str | None = None  # why this might not be the route the kernel takes (rules kpdiag could not evaluate)
    linkdown: str | None = None  # its device has no carrier: how the node shows it ("docker0: NO-CARRIER, state DOWN")


@dataclass
class RoutingTable:
    local_ips: set[tuple[int, int]] = field(default_factory=set)
    routes: list[tuple[Prefix, Route]] = field(default_factory=list)  # main table, longest prefix first
    local_routes: list[tuple[Prefix, Route]] = field(default_factory=list)
    addr_dev: dict[tuple[int, int], str] = field(default_factory=dict)
    # net.ipv4.conf.<all|default|dev>.route_localnet from the node's sysctls; None: not known
    route_localnet: dict[str, bool] | None = None
    # net.ipv4.conf.<all|dev>.forwarding (by interface) and net.ipv6.conf.all.forwarding; None: not known
    forwarding: dict[int, dict[str, bool]] | None = None
    # routes of the other tables (policy routing), by table name ("100", "default", …)
    tables: dict[str, list[tuple[Prefix, Route]]] = field(default_factory=dict)
    # the policy-routing rules (kpdiag.parse.node.IpRule), both families, by priority; None: not known
    rules: list[IpRule] | None = None
    # net.ipv{4,6}.conf.<all|dev>.ignore_routes_with_linkdown (by family, by interface); None: not known (the kernel's
    # default, 0: routes of a device without carrier are still used)
    ignore_linkdown: dict[int, dict[str, bool]] | None = None
    # per table: minus the prefix length of each route, in the table's order (add_route's bisection)
    _lengths: dict[str, list[int]] = field(default_factory=dict, init=False, repr=False, compare=False)
    _index: tuple[int, set[tuple[int, int]], list[Prefix]] | None = field(
        default=None, init=False, repr=False, compare=False
    )  # _local_index's

    @classmethod
    def from_local_ips(cls, ips: Iterable[str]) -> RoutingTable:
        rt = cls()
        for ip in ips:
            rt.local_ips.add(parse_ip(ip))
        return rt

    def add_route(self, prefix: Prefix, route: Route) -> None:
        if route.table == "local":
            target = self.local_routes
        elif route.table == "main":
            target = self.routes
        else:
            target = self.tables.setdefault(route.table, [])
        # longest prefix first, a new route after those of its length (what a stable sort after each append gave),
        # found by bisection: building a table of n routes is n log n, not n² (an IPVS node has a local route per
        # ClusterIP)
        keys = self._lengths.get(route.table)
        if keys is None or len(keys) != len(target):  # first use, or the list was filled some other way
            keys = self._lengths[route.table] = sorted(-_length(p) for p, _ in target)
            if [-_length(p) for p, _ in target] != keys:
                target.sort(key=lambda pr: -_length(pr[0]))
        at = bisect.bisect_right(keys, -_length(prefix))
        keys.insert(at, -_length(prefix))
        target.insert(at, (prefix, route))

    def policy_rules(self, version: int) -> list[IpRule] | None:
        """This family's rules when any is not one of the kernel's defaults (else None: the plain lookup is exact)."""
        if not self.rules:
            return None
        mine = [r for r in self.rules if r.family == version]
        return mine if any(not r.default for r in mine) else None

    def is_local(self, addr: int, version: int = 4) -> bool:
        if version == 4 and _LOOPBACK.contains(addr, 4):
            return True
        if (addr, version) in self.local_ips:
            return True
        hosts, nets = self._local_index()
        if (addr, version) in hosts:
            return True
        return any(prefix.contains(addr, version) for prefix in nets)

    def _local_index(self) -> tuple[set[tuple[int, int]], list[Prefix]]:
        """The local table's ``local`` routes: host routes as a set (an IPVS node has one per ClusterIP), the
        others as a list; rebuilt when the table changed."""
        index = self._index
        if index is None or index[0] != len(self.local_routes):
            hosts, nets = set(), []
            for prefix, route in self.local_routes:
                if route.type == "local":
                    (hosts.add((prefix.net, prefix.version)) if prefix.is_host else nets.append(prefix))
            index = self._index = (len(self.local_routes), hosts, nets)
        return index[1], index[2]

    def lookup(
        self,
        addr: int,
        version: int = 4,
        src: int | None = None,
        iif: str | None = None,
        mark: int | None = None,
        proto: str | None = None,
        sport: int | None = None,
        dport: int | None = None,
    ) -> Route | None:
        """The route a packet to ``addr`` takes; None when no routes of its IP version are known at all (a bundle
        whose routes were read with plain `ip route`, which shows IPv4 only, knows nothing of IPv6).

        With the packet's source (``src``; ``iif`` "lo" for the node's own packets, its mark, protocol and ports)
        the node's policy-routing rules are followed; without it (address-type questions) only the local and main
        tables are asked, as the kernel does for those."""
        if self.is_local(addr, version):
            return Route("local", dev="lo", table="local")
        if not self.knows(version):
            return None
        rules = self.policy_rules(version) if src is not None else None
        if rules is None or src is None:
            return self._in_table(self.routes, addr, version) or Route("unreachable", dst=NO_ROUTE)
        return self._policy_lookup(rules, addr, version, src, iif, mark, proto, sport, dport)

    def ignores_linkdown(self, dev: str | None, version: int) -> bool:
        """Whether the kernel skips routes of ``dev`` while it has no carrier: ignore_routes_with_linkdown is 1 for
        "all" or for that device (unknown: the kernel's default 0)."""
        known = (self.ignore_linkdown or {}).get(version) or {}
        return bool(known.get("all") or (dev is not None and known.get(dev)))

    def without_linkdown(self, addr: int, version: int = 4) -> Route | None:
        """The main-table route the kernel would take if every route of a device without carrier were passed over
        (what ignore_routes_with_linkdown = 1 gives): the route a linkdown route shadows (None: none)."""
        for prefix, route in self.routes:
            if prefix.contains(addr, version) and not route.linkdown:
                return route
        return None

    def _in_table(
        self, routes: list[tuple[Prefix, Route]], addr: int, version: int, suppress: int | None = None
    ) -> Route | None:
        """Longest-prefix match; with ``suppress`` (a rule's suppress_prefixlength) a match of that prefix length or
        shorter counts as no route, and the walk goes on to the next rule — as the kernel does. A route of a device
        without carrier is passed over when ignore_routes_with_linkdown says so (the next, shorter one is taken)."""
        for prefix, route in routes:
            if prefix.contains(addr, version):
                if route.linkdown and self.ignores_linkdown(route.dev, version):
                    continue
                if suppress is not None and bin(prefix.mask).count("1") <= suppress:
                    return None
                return route
        return None

    def _policy_lookup(
        self,
        rules: list[IpRule],
        addr: int,
        version: int,
        src: int,
        iif: str | None,
        mark: int | None,
        proto: str | None,
        sport: int | None,
        dport: int | None,
    ) -> Route:
        unsure: list[str] = []

        def finish(route: Route) -> Route:
            if unsure:
                why = (
                    f"policy-routing rule(s) {'; '.join(unsure[:3])} may also apply to this packet (kpdiag cannot tell): "
                    "if one does, the kernel routes it differently"
                )
                route = replace(route, uncertain=why)
            return route

        for rule in rules:
            hit = rule_matches(rule, src, addr, version, iif, mark, proto, sport, dport)
            if hit is False:
                continue
            if hit is None:
                unsure.append(f"'{rule.text()}'")
                continue
            label = None if rule.default else rule.text()
            if rule.action in ("blackhole", "unreachable", "prohibit"):
                return finish(Route(rule.action, dst=f"(ip rule {rule.priority})", table="-", rule=rule.text()))
            if rule.action != "lookup":  # goto and nop: nothing is looked up here
                if rule.action == "goto":
                    unsure.append(f"'{rule.text()}' (goto is not followed)")
                continue
            if rule.table == "local":
                continue  # is_local() above answered for the local table
            routes = self.routes if rule.table == "main" else self.tables.get(rule.table or "", [])
            route = self._in_table(routes, addr, version, rule.suppress_prefixlen)
            if route is None or route.type == "throw":
                continue
            return finish(replace(route, rule=label) if label else route)
        return finish(Route("unreachable", dst=NO_ROUTE))

    @property
    def has_routes(self) -> bool:
        return bool(self.routes)

    @staticmethod
    def dropped_on_receipt(src: int, dst: int, version: int) -> str | None:
        """Why the kernel drops a packet that arrived on an interface before any hook sees it, or None: IPv6 to or from
        the loopback address ::1 (IPv6 has no route_localnet)."""
        if version == 6 and (dst == 1 or src == 1):
            return (
                "an IPv6 packet to or from ::1 that arrives on an interface is dropped by the kernel on receipt, before "
                "PREROUTING: no rule sees it"
            )
        return None

    def martian(self, src: int, dst: int, version: int, iif: str | None) -> tuple[str, bool] | None:
        """Why the kernel drops a packet that arrived on an interface (not one the node sent) at the routing decision
        after PREROUTING, or None: a loopback destination or source (127.0.0.0/8) is a martian unless route_localnet
        is 1 for "all" or for the input interface. Returns (why, uncertain) — uncertain when route_localnet is not
        known (the kernel's default, 0, is assumed) or when only some interfaces have it and the input one is unknown."""
        if version != 4:
            return None
        if _LOOPBACK.contains(dst, 4):
            what = "martian destination: a packet to 127.0.0.0/8 that arrived on an interface"
        elif _LOOPBACK.contains(src, 4):
            what = "martian source: a packet from 127.0.0.0/8 that arrived on an interface"
        else:
            return None
        known = self.route_localnet
        if known is None:
            return (
                f"{what} is dropped by the kernel unless net.ipv4.conf.all.route_localnet = 1; the node's sysctls are not "
                "known (no bundle): the kernel's default 0 is assumed",
                True,
            )
        if known.get("all") or (iif is not None and known.get(iif)):
            return None
        where = (
            "net.ipv4.conf.all.route_localnet = 0"
            if iif is None
            else f"net.ipv4.conf.all.route_localnet and .{iif}.route_localnet are 0"
        )
        others = sorted(k for k, v in known.items() if v and k not in ("all", "default"))
        if iif is None and others:
            return (
                f"{what} is dropped by the kernel unless route_localnet = 1 on its input interface: it is 0 for all, "
                f"1 on {', '.join(others)} (give --iif to say which)",
                True,
            )
        return (f"{what} is dropped by the kernel: {where} (kube-proxy sets it to 1 for NodePorts on localhost)", False)

    def not_forwarded(self, version: int, iif: str | None) -> tuple[str, bool] | None:
        """Why the kernel drops a packet that arrived on an interface and must be forwarded, or None. IPv4 forwards
        only when net.ipv4.conf.<input interface>.forwarding is 1 (net.ipv4.ip_forward sets it on every interface);
        the route lookup then fails and the packet is dropped without an ICMP error. IPv6 forwards only when
        net.ipv6.conf.all.forwarding is 1 (else ip6_forward drops it, silently too). Returns (why, uncertain) —
        uncertain when the input interface is not known and some interfaces forward while "all" does not. None when
        the sysctls are unknown or say it is forwarded."""
        known = (self.forwarding or {}).get(version)
        if not known:
            return None
        unsure = False
        if version == 4:
            key = iif if iif is not None and iif in known else "all"
            if key not in known or known[key]:
                return None
            name = "net.ipv4.ip_forward = 0" if key == "all" else f"net.ipv4.conf.{key}.forwarding = 0"
            others = sorted(k for k, v in known.items() if v and k not in ("all", "default", "lo"))
            if key == "all" and iif is None and others:
                name += f" (but 1 on {', '.join(others)}: give --iif to say where the packet arrives)"
                unsure = True
        else:
            if "all" not in known or known["all"]:
                return None
            name = "net.ipv6.conf.all.forwarding = 0"
        return (
            f"{name}: the node does not forward packets, so the kernel drops this one (which must leave through "
            "another interface) after PREROUTING, silently — the client times out (KP501)",
            unsure,
        )

    def knows(self, version: int) -> bool:
        """Are any routes of this IP version known?"""
        return any(prefix.version == version for prefix, _ in self.routes)


_PROTO_NUMBERS = {"tcp": "6", "udp": "17", "sctp": "132", "icmp": "1", "ipv6-icmp": "58"}


def rule_matches(
    rule: IpRule,
    src: int,
    dst: int,
    version: int,
    iif: str | None,
    mark: int | None,
    proto: str | None,
    sport: int | None,
    dport: int | None,
) -> bool | None:
    """Whether a policy-routing rule's selectors match the packet (as the kernel's fib rule match does): True, False,
    or None when a selector depends on something the trace does not know."""
    results: list[bool | None] = []
    for text, addr in ((rule.src, src), (rule.dst, dst)):
        if text:
            try:
                results.append(parse_prefix(text).contains(addr, version))
            except ValueError:
                results.append(None)
    if rule.iif:
        results.append(None if iif is None else rule.iif == iif)
    if rule.oif:
        results.append(None if iif == "lo" else False)  # only a socket bound to a device has an output interface here
    if rule.fwmark is not None:
        results.append(None if mark is None else ((mark ^ rule.fwmark) & rule.fwmask) == 0)
    if rule.ipproto:
        results.append(
            None
            if proto is None
            else _PROTO_NUMBERS.get(proto, proto) == _PROTO_NUMBERS.get(rule.ipproto, rule.ipproto)
        )
    for rng, port in ((rule.sport, sport), (rule.dport, dport)):
        if rng:
            results.append(None if port is None else rng[0] <= port <= rng[1])
    if rule.unknown:
        results.append(None)
    if False in results:
        match: bool | None = False
    elif None in results:
        match = None
    else:
        match = True
    if rule.invert and match is not None:
        match = not match
    return match


def route_localnet_from_sysctl(sysctl: Mapping[str, object] | None) -> dict[str, bool] | None:
    """net.ipv4.conf.X.route_localnet by interface X, from parsed ``sysctl -a`` (None when it says nothing of it)."""
    if not sysctl:
        return None
    out: dict[str, bool] = {}
    for key, value in sysctl.items():
        if key.startswith("net.ipv4.conf.") and key.endswith(".route_localnet"):
            raw = getattr(value, "value", value)
            out[key[len("net.ipv4.conf.") : -len(".route_localnet")]] = str(raw).strip() == "1"
    return out if "all" in out else None


def forwarding_from_sysctl(sysctl: Mapping[str, object] | None) -> dict[int, dict[str, bool]] | None:
    """net.ipv4.conf.X.forwarding and net.ipv6.conf.X.forwarding by interface X (net.ipv4.ip_forward is
    net.ipv4.conf.all.forwarding), from parsed ``sysctl -a``; None when it says nothing of them."""
    if not sysctl:
        return None
    out: dict[int, dict[str, bool]] = {4: {}, 6: {}}
    for key, value in sysctl.items():
        for ver in (4, 6):
            prefix = f"net.ipv{ver}.conf."
            if key.startswith(prefix) and key.endswith(".forwarding"):
                out[ver][key[len(prefix) : -len(".forwarding")]] = str(getattr(value, "value", value)).strip() == "1"
    if "net.ipv4.ip_forward" in sysctl:
        out[4]["all"] = (
            str(getattr(sysctl["net.ipv4.ip_forward"], "value", sysctl["net.ipv4.ip_forward"])).strip() == "1"
        )
    return out if out[4] or out[6] else None


def ignore_linkdown_from_sysctl(sysctl: Mapping[str, object] | None) -> dict[int, dict[str, bool]] | None:
    """net.ipv{4,6}.conf.X.ignore_routes_with_linkdown by family and interface X; None when it says nothing of them."""
    if not sysctl:
        return None
    out: dict[int, dict[str, bool]] = {4: {}, 6: {}}
    for key, value in sysctl.items():
        for ver in (4, 6):
            prefix = f"net.ipv{ver}.conf."
            if key.startswith(prefix) and key.endswith(".ignore_routes_with_linkdown"):
                name = key[len(prefix) : -len(".ignore_routes_with_linkdown")]
                out[ver][name] = str(getattr(value, "value", value)).strip() == "1"
    return out if out[4] or out[6] else None


def link_without_carrier(link: dict[str, Any]) -> str | None:
    """How ``ip -j addr`` shows that an interface is up but has no carrier (a bridge whose last port left, a veth
    whose peer is down): its flags hold UP and NO-CARRIER. None otherwise (an interface that is down has no routes)."""
    flags = link.get("flags")
    if not isinstance(flags, list) or "NO-CARRIER" not in flags or "UP" not in flags:
        return None
    state = link.get("operstate")
    return f"{link.get('ifname')}: <{','.join(str(f) for f in flags)}>" + (
        f" state {state}" if isinstance(state, str) else ""
    )


def routing_from_ip_json(
    addrs: list[Any] | None,
    routes: list[Any] | None,
    sysctl: Mapping[str, object] | None = None,
    rules: list[IpRule] | None = None,
) -> RoutingTable:
    """Build from the parsed JSON of ``ip -j addr`` and ``ip -j route show table all`` (and ``sysctl -a``, for
    route_localnet, forwarding and ignore_routes_with_linkdown; the parsed ``ip -j rule``, for policy routing)."""
    rt = RoutingTable()
    rt.rules = rules
    rt.route_localnet = route_localnet_from_sysctl(sysctl)
    rt.forwarding = forwarding_from_sysctl(sysctl)
    rt.ignore_linkdown = ignore_linkdown_from_sysctl(sysctl)
    no_carrier: dict[str, str] = {}
    for link in addrs or []:
        if not isinstance(link, dict):
            continue
        dev = link.get("ifname")
        down = link_without_carrier(link)
        if down and isinstance(dev, str):
            no_carrier[dev] = down
        for info in link.get("addr_info", []) or []:
            if not isinstance(info, dict):
                continue
            local = info.get("local")
            if not isinstance(local, str):
                continue
            if not local:
                continue
            try:
                key = parse_ip(local)
            except ValueError:
                continue
            rt.local_ips.add(key)
            if dev:
                rt.addr_dev[key] = dev
    for entry in routes or []:
        if not isinstance(entry, dict):
            continue
        dst = entry.get("dst", "")
        if not isinstance(dst, str):
            continue
        table = str(entry.get("table", "main"))
        rtype = entry.get("type", "unicast")
        table = {"255": "local", "254": "main", "253": "default"}.get(table, table)
        try:
            if dst == "default":
                prefix = (
                    parse_prefix("0.0.0.0/0") if ":" not in str(entry.get("gateway") or "") else parse_prefix("::/0")
                )
            else:
                prefix = parse_prefix(dst)
        except ValueError:
            continue
        gw, dev = entry.get("gateway"), entry.get("dev")
        flags = entry["flags"] if isinstance(entry.get("flags"), list) else []
        if "dead" in flags:
            continue  # the kernel never uses a dead nexthop
        dev = dev if isinstance(dev, str) else None
        linkdown = no_carrier.get(dev or "") or (f"{dev}: linkdown" if "linkdown" in flags else None)
        rt.add_route(
            prefix,
            Route(
                str(rtype),
                dev=dev,
                gateway=gw if isinstance(gw, str) else None,
                dst=dst,
                table=table,
                linkdown=linkdown if rtype == "unicast" else None,
            ),
        )
    return rt

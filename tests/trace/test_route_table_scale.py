"""The routing table is kept longest prefix first by bisection, not re-sorted on every route (issue 38: 2k routes
1.4 s, 10k 18 s; an IPVS node has a local route per ClusterIP): the same order and answers as a stable sort, with
work that grows as n log n. Times are measured by benchmarks/bench_routes.py, never here."""

from __future__ import annotations

import random

from kpdiag.parse.addr import Prefix, parse_ip, parse_prefix
from kpdiag.trace.routing import Route, RoutingTable, routing_from_ip_json


class _Counted(Prefix):
    """A prefix counting how often its mask is read (what ordering routes costs)."""

    reads = 0

    @property
    def mask(self):
        type(self).reads += 1
        return self[1]


def _random_routes(n: int, seed: int = 7) -> list[dict]:
    rnd = random.Random(seed)
    out = [{"dst": "default", "gateway": "192.168.1.1", "dev": "eth0"}]
    for i in range(n):
        length = rnd.choice([8, 16, 20, 24, 24, 28, 32, 32, 32])
        addr = f"10.{rnd.randrange(256)}.{rnd.randrange(256)}.{rnd.randrange(256)}"
        table = rnd.choice(["main", "main", "local", "100"])
        rtype = "local" if table == "local" else rnd.choice(["unicast", "unicast", "blackhole"])
        dst = str(__import__("ipaddress").ip_network(f"{addr}/{length}", strict=False))
        out.append({"dst": dst, "dev": f"d{i % 7}", "table": table, "type": rtype})
    return out


def _reference_order(routes: list[dict], table: str) -> list[str]:
    """What the table held when each insert was followed by a stable sort by prefix length (the old add_route)."""
    names = {"255": "local", "254": "main"}
    picked = [r["dst"] for r in routes if names.get(str(r.get("table", "main")), str(r.get("table", "main"))) == table]
    return sorted(picked, key=lambda d: -(0 if d == "default" else int(d.split("/")[1])))


def test_same_order_and_answers_as_a_stable_sort():
    routes = _random_routes(3000)
    rt = routing_from_ip_json([], routes)
    assert [r.dst for _, r in rt.routes] == _reference_order(routes, "main")
    assert [r.dst for _, r in rt.local_routes] == _reference_order(routes, "local")
    assert [r.dst for _, r in rt.tables["100"]] == _reference_order(routes, "100")
    rnd = random.Random(3)
    for _ in range(300):
        addr, _v = parse_ip(f"10.{rnd.randrange(256)}.{rnd.randrange(256)}.{rnd.randrange(256)}")
        want = next((r for p, r in rt.routes if p.contains(addr, 4)), None)
        got = rt.lookup(addr, 4)
        local = any(r.type == "local" and p.contains(addr, 4) for p, r in rt.local_routes)
        assert got == (Route("local", dev="lo", table="local") if local else want or got)


def test_ordering_routes_is_not_quadratic():
    n = 4000
    rt = RoutingTable()
    _Counted.reads = 0
    for i in range(n):
        p = parse_prefix(f"10.{(i >> 8) & 255}.{i & 255}.0/{24 if i % 3 else 32}")
        rt.add_route(_Counted(*p), Route("unicast", dev="eth0", dst=p.text))
    assert _Counted.reads <= 8 * n, _Counted.reads  # a re-sort per insert reads each mask n times: n² / 2
    lengths = [p[1].bit_count() for p, _ in rt.routes]
    assert lengths == sorted(lengths, reverse=True)

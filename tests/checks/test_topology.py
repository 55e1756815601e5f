"""KP161: topology-aware routing / trafficDistribution as kube-proxy applies it on this node (the base bundle's
node is lab-healthy-iptables; its zone comes from its Node's topology.kubernetes.io/zone label)."""

from tests import k8sobjects as k8s
from tests.given import given

ME = "lab-healthy-iptables"


def svc(**spec):
    s = k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"}, **spec)
    return s


def auto():
    s = svc()
    s["metadata"]["annotations"] = {"service.kubernetes.io/topology-mode": "Auto"}
    return s


def hinted(*zones, unhinted=0):
    """One slice: an endpoint per zone given (its own zone, hinted for it), then ``unhinted`` without a hint."""
    eps = [(f"10.244.{i // 250}.{i % 250 + 2}", True, f"n-{z}", f"web-{i}") for i, z in enumerate(zones)]
    eps += [(f"10.244.9.{i + 2}", True, "n-x", f"web-x{i}") for i in range(unhinted)]
    sl = k8s.endpointslice("shop", "web", eps, [("http", 8080, "TCP")])
    for ep, z in zip(sl["endpoints"], zones):
        ep["zone"] = z
        ep["hints"] = {"forZones": [{"name": z}]}
    return sl


def nodes(**per_zone):
    out = [k8s.node(ME, labels={"topology.kubernetes.io/zone": "zone-a"})]
    for zone, n in per_zone.items():
        out += [k8s.node(f"{zone}-{i}", labels={"topology.kubernetes.io/zone": zone}) for i in range(n)]
    return out


def test_one_endpoint_for_this_zone_takes_all_its_traffic():
    g = given(
        services=[svc(trafficDistribution="PreferClose")],
        endpointslices=[hinted("zone-a", "zone-b", "zone-b", "zone-b")],
        nodes=nodes(),
    )
    (f,) = g.fires("KP161")
    assert f.severity.value == "warning"
    assert "every connection from zone zone-a goes to 1 of its 4 ready endpoint(s) (web-0)" in f.summary
    assert any("zone-a ← 10.244.0.2; zone-b ← 10.244.0.3, 10.244.0.4, 10.244.0.5" in e.text for e in f.evidence)
    assert any(f"node {ME}: topology.kubernetes.io/zone=zone-a" in e.text for e in f.evidence)
    assert any("/spec/trafficDistribution" in s for s in f.fix)


def test_a_share_far_below_the_zones_share_of_nodes():
    # zone-a has half the nodes (5 of 10) and 2 of the 10 endpoints: 20 % < half of 50 %
    g = given(
        services=[auto()],
        endpointslices=[hinted(*["zone-a"] * 2, *["zone-b"] * 8)],
        nodes=nodes(**{"zone-a": 4, "zone-b": 5}),
    )
    (f,) = g.fires("KP161")
    assert "2 of its 10" in f.summary and "the zone has 50% of the nodes (5 of 10)" in f.summary
    assert f.data["zone_node_share"] == 0.5
    assert any("annotate service web service.kubernetes.io/topology-mode-" in s for s in f.fix)


def test_a_fair_share_is_silent():
    g = given(
        services=[auto()], endpointslices=[hinted("zone-a", "zone-a", "zone-b", "zone-b")], nodes=nodes(**{"zone-b": 1})
    )
    g.silent("KP161")


def test_no_endpoint_for_this_zone_is_silent():  # kube-proxy then uses every endpoint
    given(services=[auto()], endpointslices=[hinted("zone-b", "zone-b")], nodes=nodes()).silent("KP161")


def test_hints_on_some_endpoints_only_are_ignored_by_kube_proxy():
    g = given(services=[auto()], endpointslices=[hinted("zone-a", "zone-b", unhinted=1)], nodes=nodes())
    (f,) = g.fires("KP161")
    assert f.severity.value == "info"
    assert "1 of its 3 ready endpoint(s) carry no zone hint (web-x0)" in f.summary
    assert "service.kubernetes.io/topology-mode=Auto" in f.summary


def test_no_hints_is_silent():
    given(services=[svc()], endpointslices=[hinted()], nodes=nodes()).silent("KP161")
    # the controller's own safeguard: the annotation, no hint on any endpoint (too few endpoints for the zones)
    given(services=[auto()], endpointslices=[hinted(unhinted=2)], nodes=nodes()).silent("KP161")


def test_zone_unknown_is_skipped():
    reason = given(
        services=[auto()], endpointslices=[hinted("zone-a", "zone-b", "zone-b")], nodes=[k8s.node(ME)]
    ).skips("KP161")
    assert "this node's zone is unknown" in reason

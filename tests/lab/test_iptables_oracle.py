"""The kernel as oracle for the iptables tracer.

A node namespace gets a kube-proxy ruleset (generated, loaded with iptables-restore), real
packets are sent from an external client, from pods and from the node itself, and the
kernel's own ``nft monitor trace`` says what happened. kpdiag, tracing from a bundle recorded
from the same namespace, must agree: the kernel's DNAT choice is one of kpdiag's paths, the
chains walked are the same, masquerade and drop/reject agree, and the paths cover exactly the
service's endpoints with probabilities summing to 1.
"""

from __future__ import annotations

import pytest

from kpdiag.state.node import NodeState
from kpdiag.bundle.store import Bundle
from tests.synth import Endpoint, Port, Service, iptables_ruleset
from kpdiag.trace.model import Packet
from kpdiag.trace.netfilter import IptablesTracer

from .bundle_from_ns import bundle_from_ns
from .netlab import KernelTrace, KubeNodeLab, Sends, connect_from, kernel_fates, kernel_walk, send_packets

pytestmark = pytest.mark.lab


def _services(pods: dict[str, str]) -> list[Service]:
    ips = list(pods.values())
    return [
        Service("shop", "web", "10.96.0.10", [Port("http", 80, 8080)], [Endpoint(ip) for ip in ips[:3]]),
        Service("shop", "dns", "10.96.0.11", [Port("dns", 53, 5353, "udp")], [Endpoint(ips[1])]),
        Service("shop", "empty", "10.96.0.12", [Port("http", 80, 8080)], []),
        Service(
            "shop",
            "local",
            "10.96.0.13",
            [Port("http", 80, 8080, node_port=30080)],
            [Endpoint(ips[3], local=True), Endpoint("10.244.2.7")],
            etp_local=True,
        ),
        Service(
            "shop",
            "remote",
            "10.96.0.14",
            [Port("http", 80, 8080, node_port=30081)],
            [Endpoint("10.244.2.8")],
            etp_local=True,
        ),
        Service(
            "shop",
            "sticky",
            "10.96.0.15",
            [Port("http", 80, 8080)],
            [Endpoint(ips[0]), Endpoint(ips[2])],
            affinity_seconds=10800,
        ),
        Service(
            "shop", "wide", "10.96.0.16", [Port("http", 80, 8080, node_port=30082)], [Endpoint(ip) for ip in ips[:5]]
        ),
        # internalTrafficPolicy: Local: KUBE-SVL over this node's endpoints; none here → filter DROP "has no local endpoints"
        Service(
            "shop",
            "agent",
            "10.96.0.17",
            [Port("http", 80, 8080)],
            [Endpoint(ips[2], local=True), Endpoint("10.244.2.9")],
            itp_local=True,
        ),
        Service("shop", "probe", "10.96.0.18", [Port("http", 80, 8080)], [Endpoint("10.244.2.10")], itp_local=True),
    ]


def _chain_walk(steps) -> list[tuple[str, str]]:
    return [(s.table, s.chain) for s in steps if s.rule is not None]


def test_kernel_agrees_with_tracer(lab, tmp_path):
    k = KubeNodeLab.build(lab, pod_count=5)
    lab.route("node", "default", "via", k.client_ip)  # a real node has a default route
    services = _services(k.pods)
    k.load_iptables(iptables_ruleset(services))

    pod0 = k.pods["pod0"]
    pod4 = k.pods["pod4"]  # not an endpoint of shop/web
    sends = Sends()
    add = sends.add

    add("external", k.client_ip, "10.96.0.10", 80, repeat=12)
    add("pod", pod4, "10.96.0.10", 80, repeat=12)
    add("external", k.client_ip, "10.96.0.11", 53, proto="udp", repeat=2)
    add("external", k.client_ip, "10.96.0.12", 80)  # no endpoints: REJECT
    add("external", k.client_ip, "192.168.50.1", 30080, repeat=3)  # ETP=Local with a local endpoint
    add("external", k.client_ip, "192.168.50.1", 30081)  # ETP=Local without: DROP
    add("external", k.client_ip, "10.96.0.15", 80, repeat=4)  # affinity
    add("external", k.client_ip, "10.96.0.16", 80, repeat=20)
    add("external", k.client_ip, "192.168.50.1", 30082, repeat=6)
    add("external", k.client_ip, "10.96.0.99", 80)  # no service at all
    add("pod", pod4, "10.96.0.17", 80, repeat=3)  # internalTrafficPolicy: Local, one endpoint here
    add("pod", pod4, "10.96.0.18", 80)  # … and none here: DROP
    add("external", k.client_ip, "10.96.0.17", 80)  # off-cluster: masqueraded (the rule is in KUBE-SVL)
    add("node", "192.168.50.1", "10.96.0.10", 80, repeat=6)  # the node itself: OUTPUT hook

    with KernelTrace(lab, "node") as kt:
        send_packets(lab, "client", sends.of("external"), wait=0.05)
        send_packets(lab, "pod4", sends.of("pod"), wait=0.05)
        connect_from(lab, "node", sends.of("node"))
        fates = kernel_fates(kt.events())

    bundle_dir = bundle_from_ns(lab, "node", str(tmp_path / "bundle"))
    state = NodeState(Bundle.open(bundle_dir))
    tracer = IptablesTracer(state.iptables(), state.routing, state.ipsets)

    endpoints = {
        ("10.96.0.10", 80): {f"{ip}:8080" for ip in list(k.pods.values())[:3]},
        ("10.96.0.16", 80): {f"{ip}:8080" for ip in list(k.pods.values())[:5]},
        ("192.168.50.1", 30082): {f"{ip}:8080" for ip in list(k.pods.values())[:5]},
        ("10.96.0.15", 80): {f"{k.pods['pod0']}:8080", f"{k.pods['pod2']}:8080"},
        ("192.168.50.1", 30080): {f"{k.pods['pod3']}:8080"},
        ("10.96.0.17", 80): {f"{k.pods['pod2']}:8080"},
    }
    seen_dnat: dict[tuple, set] = {}
    checked = 0
    for origin, p in sends:
        fate = fates.get(p["sport"])
        assert fate is not None, f"the kernel traced no packet with sport {p['sport']} ({p})"
        result = tracer.trace(Packet(p["src"], p["dst"], p["proto"], p["dport"], sport=p["sport"], origin=origin))
        assert abs(sum(x.probability for x in result.paths) - 1.0) < 1e-9
        assert not result.uncertain, result.paths[0].notes
        want = endpoints.get((p["dst"], p["dport"]))
        if want is not None:
            assert result.dnat_set() == want, (p, result.dnat_set())
            n = len(want)
            for path in result.paths:
                assert path.probability == pytest.approx(1.0 / n, abs=1e-6)
        matching = [x for x in result.paths if x.dnat == fate.dnat_to]
        assert matching, f"kernel DNAT {fate.dnat_to} not among kpdiag's {result.dnat_set()} for {p}"
        path = matching[0]
        assert path.verdict == fate.verdict, (p, path.verdict, fate.verdict, fate.lines)
        if path.verdict == "accept":
            assert path.masquerade == fate.masquerade, (p, "\n".join(fate.lines))
        assert _chain_walk(path.steps) == kernel_walk(fate.lines), (p, fate.lines)
        seen_dnat.setdefault((p["dst"], p["dport"]), set()).add(fate.dnat_to)
        checked += 1
    assert checked == len(sends)
    # the kernel really spread the load: more than one endpoint seen for the 3- and 5-endpoint services
    assert len(seen_dnat[("10.96.0.10", 80)]) > 1
    assert len(seen_dnat[("10.96.0.16", 80)]) > 1
    # the expected special fates really happened in the kernel
    by_dst = {(p["dst"], p["dport"]): fates[p["sport"]] for _, p in sends}
    assert by_dst[("10.96.0.12", 80)].verdict == "reject"
    assert by_dst[("192.168.50.1", 30081)].verdict == "drop"
    assert by_dst[("10.96.0.18", 80)].verdict == "drop"
    assert by_dst[("10.96.0.17", 80)].masquerade  # the external one, sent last
    # pod traffic is not masqueraded; the hairpin (a pod reaching itself through its Service) is
    pod_fates = [fates[p["sport"]] for o, p in sends if o == "pod"]
    assert pod_fates and not any(f.masquerade for f in pod_fates)
    hairpin = tracer.trace(Packet(pod0, "10.96.0.10", "tcp", 80, origin="pod"))
    assert {x.dnat: x.masquerade for x in hairpin.paths}[f"{pod0}:8080"] is True
    assert sum(x.masquerade for x in hairpin.paths) == 1

"""The kernel as oracle for the nftables tracer: kube-proxy-style nftables rules in a namespace,
real packets, `nft monitor trace`, and kpdiag's paths traced from `nft -j list ruleset` of the same
namespace must contain the kernel's choice, walk the same chains, and agree on DNAT, masquerade,
reject/drop.

nft 1.0.6's `nft monitor trace` omits the rule lines of the nat prerouting chains for this ruleset
(the filter and postrouting lines are there). The kernel's DNAT is then read from the packet as the
next hook sees it, and the chains the kernel does report must appear, in order, on kpdiag's path."""

import pytest

from kpdiag.bundle.store import Bundle
from kpdiag.state.node import NodeState
from tests.synth import Endpoint, Port, Service, nft_ruleset
from kpdiag.trace.model import Packet
from kpdiag.trace.nftables import NftTracer

from .bundle_from_ns import bundle_from_ns
from .netlab import KernelTrace, KubeNodeLab, Sends, connect_from, kernel_fates, kernel_walk, send_packets, subsequence

pytestmark = pytest.mark.lab


def test_kernel_agrees_with_nft_tracer(lab, tmp_path):
    k = KubeNodeLab.build(lab, pod_count=5)
    lab.route("node", "default", "via", k.client_ip)
    ips = list(k.pods.values())
    services = [
        Service("shop", "one", "10.96.0.10", [Port("http", 80, 8080)], [Endpoint(ips[0])]),
        Service("shop", "three", "10.96.0.11", [Port("http", 80, 8080)], [Endpoint(ip) for ip in ips[:3]]),
        Service("shop", "five", "10.96.0.12", [Port("dns", 53, 5353, "udp")], [Endpoint(ip) for ip in ips[:5]]),
        Service("shop", "empty", "10.96.0.13", [Port("http", 80, 8080)], []),
        Service(
            "shop",
            "local",
            "10.96.0.14",
            [Port("http", 80, 8080, node_port=30080)],
            [Endpoint(ips[3], local=True), Endpoint("10.244.2.7")],
            etp_local=True,
        ),
        Service(
            "shop",
            "remote",
            "10.96.0.15",
            [Port("http", 80, 8080, node_port=30081)],
            [Endpoint("10.244.2.8")],
            etp_local=True,
        ),
        Service(
            "shop",
            "sticky",
            "10.96.0.16",
            [Port("http", 80, 8080)],
            [Endpoint(ips[1]), Endpoint(ips[2])],
            affinity_seconds=10800,
        ),
        # internalTrafficPolicy: Local: a local-… chain over this node's endpoints; none here → drop in no-endpoint-services
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
    k.load_nft(nft_ruleset(services, node_ips=("192.168.50.1",)))
    sends = Sends()
    add = sends.add

    add("external", k.client_ip, "10.96.0.10", 80)
    add("external", k.client_ip, "10.96.0.11", 80, repeat=12)
    add("external", k.client_ip, "10.96.0.12", 53, proto="udp", repeat=15)
    add("external", k.client_ip, "10.96.0.13", 80)  # no endpoints: rejected
    add("external", k.client_ip, "10.96.0.10", 443)  # a port the Service does not define: rejected
    add("external", k.client_ip, "10.96.0.99", 80)  # unallocated service IP: dropped
    add("external", k.client_ip, "192.168.50.1", 30080, repeat=2)
    add("external", k.client_ip, "192.168.50.1", 30081)  # ETP=Local without local endpoints: dropped
    add("external", k.client_ip, "10.96.0.16", 80, repeat=4)
    add("pod", ips[4], "10.96.0.11", 80, repeat=8)
    add("pod", ips[4], "10.96.0.17", 80, repeat=3)
    add("pod", ips[4], "10.96.0.18", 80)
    add("node", "192.168.50.1", "10.96.0.11", 80, repeat=4)

    with KernelTrace(lab, "node") as kt:
        send_packets(lab, "client", sends.of("external"), wait=0.05)
        send_packets(lab, "pod4", sends.of("pod"), wait=0.05)
        connect_from(lab, "node", sends.of("node"))
        fates = kernel_fates(kt.events())

    state = NodeState(Bundle.open(bundle_from_ns(lab, "node", str(tmp_path / "b"))))
    tracer = NftTracer(state.nft(), state.routing)
    seen = {}
    for origin, p in sends:
        fate = fates.get(p["sport"])
        assert fate is not None, p
        result = tracer.trace(Packet(p["src"], p["dst"], p["proto"], p["dport"], sport=p["sport"], origin=origin))
        assert sum(x.probability for x in result.paths) == pytest.approx(1.0)
        assert not result.uncertain, [x.notes for x in result.paths]
        match = [x for x in result.paths if x.dnat == fate.dnat_to]
        assert match, (p, fate.dnat_to, result.dnat_set(), "\n".join(fate.lines))
        path = match[0]
        assert path.verdict == fate.verdict, (p, path.verdict, fate.lines)
        if path.verdict == "accept":
            assert path.masquerade == fate.masquerade, (p, fate.lines)
        assert subsequence(
            kernel_walk(fate.lines), [(s.table.split()[-1], s.chain) for s in path.steps if s.rule is not None]
        ), (p, "\n".join(fate.lines))
        seen.setdefault((p["dst"], p["dport"]), set()).add(fate.dnat_to)
    three = tracer.trace(Packet(k.client_ip, "10.96.0.11", "tcp", 80))
    assert three.dnat_set() == {f"{ip}:8080" for ip in ips[:3]}
    assert [x.probability for x in three.paths] == pytest.approx([1 / 3] * 3)
    assert len(seen[("10.96.0.11", 80)]) > 1 and len(seen[("10.96.0.12", 53)]) > 1
    by = {(p["dst"], p["dport"]): fates[p["sport"]] for _, p in sends}
    assert by[("10.96.0.13", 80)].verdict == "reject" and by[("10.96.0.10", 443)].verdict == "reject"
    assert by[("10.96.0.99", 80)].verdict == "drop" and by[("192.168.50.1", 30081)].verdict == "drop"
    assert by[("10.96.0.18", 80)].verdict == "drop" and seen[("10.96.0.17", 80)] == {f"{ips[2]}:8080"}
    assert tracer.trace(Packet(ips[4], "10.96.0.17", "tcp", 80, origin="pod")).dnat_set() == {f"{ips[2]}:8080"}

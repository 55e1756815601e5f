"""The kernel as oracle for a trace in nftables mode on a node whose iptables rules act too (a CNI's portmap DNAT, a
Docker-style DNAT, leftover KUBE-* chains): kube-proxy-style nftables rules and iptables(-nft) nat DNATs in one
namespace, real packets, `nft monitor trace` (which shows iptables-nft's rules too); kpdiag's trace of that namespace's
bundle must reach the kernel's verdict and DNAT (kpdiag/dataplane/nftables.py: the iptables walk with kube-proxy's
table at its hooks), including the kernel's rule that a hook runs no further nat chain once one bound the connection."""

import pytest

from kpdiag.bundle.store import Bundle
from kpdiag.state.node import NodeState
from kpdiag.trace.model import Packet
from tests.synth import Endpoint, Port, Service, nft_ruleset

from .bundle_from_ns import bundle_from_ns
from .netlab import KernelTrace, KubeNodeLab, Sends, kernel_fates, send_packets

pytestmark = pytest.mark.lab


def test_kernel_agrees_when_iptables_dnats_on_an_nftables_node(lab, tmp_path):
    k = KubeNodeLab.build(lab, pod_count=2)
    lab.route("node", "default", "via", k.client_ip)
    ips = list(k.pods.values())
    services = [
        Service("shop", "web", "10.96.0.11", [Port("http", 80, 8080)], [Endpoint(ips[0])]),
        Service("shop", "empty", "10.96.0.13", [Port("http", 80, 8080)], []),
    ]
    k.load_nft(nft_ruleset(services, node_ips=("192.168.50.1",)))
    dnats = {  # address → where iptables sends it: a Service without endpoints, a ClusterIP, a pod
        "192.0.2.50": "10.96.0.13:80",
        "192.0.2.51": "10.96.0.11:80",
        "192.0.2.52": f"{ips[1]}:8080",
    }
    for addr, to in dnats.items():
        lab.sh("node", ["iptables", "-t", "nat", "-A", "PREROUTING", "-d", addr, "-p", "tcp", "--dport", "80",
                        "-j", "DNAT", "--to-destination", to])  # fmt: skip
    lab.route("client", "192.0.2.0/24", "via", "192.168.50.1")
    sends = Sends()
    for addr in (*dnats, "10.96.0.11"):
        sends.add("external", k.client_ip, addr, 80)
    with KernelTrace(lab, "node") as kt:
        send_packets(lab, "client", sends.of("external"), wait=0.05)
        fates = kernel_fates(kt.events())
    state = NodeState(Bundle.open(bundle_from_ns(lab, "node", str(tmp_path / "b"))))
    assert state.dataplane.name == "nftables"
    tracer = state.dataplane.tracer(state)
    got = {}
    for _, p in sends:
        fate = fates.get(p["sport"])
        assert fate is not None, p
        result = tracer.trace(Packet(p["src"], p["dst"], "tcp", p["dport"], sport=p["sport"]))
        assert [(x.verdict, x.dnat) for x in result.paths] == [(fate.verdict, fate.dnat_to)], (p, "\n".join(fate.lines))
        assert not result.uncertain, result.paths
        got[p["dst"]] = (fate.verdict, fate.dnat_to)
    # what the kernel did, said plainly: the no-endpoint reject after iptables' DNAT; a ClusterIP reached by iptables'
    # DNAT is not DNATed again (kube-proxy's nat chain is skipped) and cluster-ips-check rejects it; a pod is reached
    assert got == {
        "192.0.2.50": ("reject", "10.96.0.13:80"),
        "192.0.2.51": ("reject", "10.96.0.11:80"),
        "192.0.2.52": ("accept", f"{ips[1]}:8080"),
        "10.96.0.11": ("accept", f"{ips[0]}:8080"),
    }

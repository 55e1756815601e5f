"""The node's own packet to a local address, rule by rule against the kernel (``nft monitor trace``): after
POSTROUTING the loopback device hands it back to the receive path, where PREROUTING runs again (kube-proxy's
filter-prerouting-pre-dnat, iptables' raw and mangle) before INPUT — but no nat chain (the connection got its
bindings in OUTPUT and POSTROUTING). kpdiag's path left the loopback pass out (kpdiag/trace/walker.py ``_loopback``).
"""

from __future__ import annotations

import pytest

from tests.synth import Endpoint, Port, Service, iptables_ruleset, nft_ruleset

from .bundle_from_ns import bundle_from_ns
from .netlab import KernelTrace, KubeNodeLab, Sends, connect_from, kernel_fates, kernel_walk, subsequence

pytestmark = pytest.mark.lab

NODE_IP = "192.168.50.1"
# the API server's Service: its endpoint is the node itself (a hostNetwork pod), so the DNATed packet stays local
SERVICES = [Service("default", "kubernetes", "10.96.0.1", [Port("https", 443, 6443)], [Endpoint(NODE_IP)])]


def _node(lab, mode: str):
    k = KubeNodeLab.build(lab, pod_count=1)
    lab.route("node", "default", "via", k.client_ip)
    if mode == "nftables":
        k.load_nft(nft_ruleset(SERVICES))
    else:
        k.load_iptables(iptables_ruleset(SERVICES))
    # a raw and a mangle PREROUTING rule for the test packets: iptables' tables run on the loopback pass too,
    # its nat table does not
    for table in ("raw", "mangle", "nat"):
        lab.sh("node", ["iptables", "-t", table, "-I", "PREROUTING", "-p", "tcp", "--sport", "41000:41999"])
    lab.sh("node", ["iptables", "-t", "nat", "-I", "INPUT", "-p", "tcp", "--sport", "41000:41999"])
    return k


def _ours(path) -> list[tuple[str, str]]:
    return [(s.table.split()[-1], s.chain) for s in path.steps if s.rule is not None]


@pytest.mark.parametrize("mode", ["nftables", "iptables"])
def test_the_loopback_pass_is_on_the_path_rule_by_rule(lab, mode, tmp_path):
    from kpdiag.commands.trace import setup_trace
    from kpdiag.trace.model import Packet

    _node(lab, mode)
    sends = Sends()
    sends.add("node", NODE_IP, NODE_IP, 22)  # the node's own address, no Service: delivered locally
    # DNATed to the node itself; from cni0's address (inside the cluster CIDR, not the endpoint's): not masqueraded,
    # so the source port the kernel's trace is matched by stays the same on the loopback pass
    sends.add("node", "10.244.1.1", "10.96.0.1", 443)
    with KernelTrace(lab, "node") as kt:
        connect_from(lab, "node", [dict(p, bind=p["src"]) for p in sends.of("node")])
        groups = kt.events()
    fates = kernel_fates(groups)
    bundle_from_ns(lab, "node", str(tmp_path / "b"), node_name="loopback")
    setup = setup_trace(bundle=str(tmp_path / "b"))
    for _, p in sends:
        fate = fates[p["sport"]]
        packet = Packet(p["src"], p["dst"], p["proto"], p["dport"], sport=p["sport"], origin="node")
        result = setup.tracer.trace(packet)
        assert len(result.paths) == 1, result.paths
        path = result.paths[0]
        assert path.delivery == "local" and path.verdict == "accept", path
        kernel, ours = kernel_walk(fate.lines), _ours(path)
        # every rule the kernel reports, in order, is on kpdiag's path (kpdiag also shows a chain's implicit return)
        assert subsequence(kernel, ours), (p, kernel, ours)
        for hook_chain in (("raw", "PREROUTING"), ("mangle", "PREROUTING")):  # the loopback pass, in both
            assert hook_chain in kernel and hook_chain in ours, (p, kernel, ours)
        for skipped in (("nat", "PREROUTING"), ("nat", "INPUT")):  # its nat chains: in neither
            assert skipped not in kernel and skipped not in ours, (p, kernel, ours)
        hooks = [s.hook for s in path.steps if s.rule is not None]
        assert "PREROUTING" in hooks and hooks.index("PREROUTING") > hooks.index("POSTROUTING"), hooks
        assert not [s for s in path.steps if s.hook in ("PREROUTING", "INPUT") and s.table == "nat"], path.steps
        if mode == "nftables":
            assert ("kube-proxy", "filter-prerouting-pre-dnat") in kernel
            assert ("kube-proxy", "filter-prerouting-pre-dnat") in ours

"""The kernel as oracle for a host firewall in its own nftables table on a node whose kube-proxy runs in iptables
mode (firewalld's `inet firewalld` on RHEL-family nodes): forwarded pod traffic meets both — kube-proxy's iptables
rules and the firewall's base chains — at each hook, by priority. A trace of the node's bundle must show the
firewall's reject where the kernel rejects, and deliver where the firewall lets the packet through."""

import pytest

from kpdiag.commands.trace import setup_trace
from kpdiag.trace.model import Packet
from tests.synth import Endpoint, Port, Service, iptables_ruleset

from .bundle_from_ns import bundle_from_ns
from .netlab import KernelTrace, KubeNodeLab, Sends, kernel_fates, send_packets

pytestmark = pytest.mark.lab

FIREWALL = """table inet firewalld {{
  chain filter_FORWARD {{ type filter hook forward priority filter + 10; policy accept;
    ct state established,related accept
    ip daddr {blocked} reject with icmpx admin-prohibited
  }}
}}
"""


def test_kernel_and_trace_agree_on_a_host_firewall_table_in_iptables_mode(lab, tmp_path):
    k = KubeNodeLab.build(lab, pod_count=2)
    blocked, open_ = k.pods["pod0"], k.pods["pod1"]
    services = [
        Service("shop", "blocked", "10.96.0.40", [Port("http", 80, 8080)], [Endpoint(blocked)]),
        Service("shop", "open", "10.96.0.41", [Port("http", 80, 8080)], [Endpoint(open_)]),
    ]
    k.load_iptables(iptables_ruleset(services))
    k.load_nft(FIREWALL.format(blocked=blocked))
    sends = Sends(first_sport=41700)
    sends.add("external", k.client_ip, "10.96.0.40", 80)
    sends.add("external", k.client_ip, "10.96.0.41", 80)
    with KernelTrace(lab, "node") as kt:
        send_packets(lab, "client", sends.of("external"), wait=0.05)
        fates = kernel_fates(kt.events())
    setup = setup_trace(bundle=bundle_from_ns(lab, "node", str(tmp_path / "b")), mode="iptables")
    assert setup.tracer.nft is not None  # the firewall's table was found and is traced
    kernel = {}
    for sport, fate in fates.items():  # kernel_fates reads ip/ip6 tables; the firewall's table is inet
        rejected = any(l.startswith("inet firewalld ") and "reject" in l and "(verdict drop)" in l for l in fate.lines)
        kernel[sport] = "reject" if rejected else fate.verdict
    got = {}
    for _, p in sends:
        result = setup.tracer.trace(Packet(p["src"], p["dst"], "tcp", 80, sport=p["sport"], iif="ext0"))
        assert result.complete and not result.uncertain, result.notes
        (path,) = result.paths
        got[p["dst"]] = path
        assert path.verdict == kernel[p["sport"]], (p, path.verdict, fates[p["sport"]].lines)
    assert kernel[41700] == "reject" and kernel[41701] == "accept"
    assert got["10.96.0.40"].steps[-1].table == "inet firewalld" and got["10.96.0.40"].dnat == f"{blocked}:8080"
    assert got["10.96.0.41"].delivery == "forward" and got["10.96.0.41"].route["dev"] == "cni0"

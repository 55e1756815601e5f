"""The kernel as oracle for IPv6 (dual-stack and IPv6 clusters): kube-proxy's IPv6 rules live in ip6tables.

The lab node gets IPv6 addresses on the same links as its IPv4 ones, kube-proxy's IPv6 ruleset is loaded with
ip6tables-restore, real IPv6 packets are sent from the external client, a pod and the node itself, and
``nft monitor trace`` (an ip6 trace table) says what happened. kpdiag, tracing from a bundle of that namespace
(node/ip6tables-save.txt, IPv6 routes), must pick the ip6tables rules for an IPv6 packet and agree with the kernel:
DNAT choice among its paths (written [addr]:port), chains walked, masquerade, reject/drop.
"""

from __future__ import annotations

import pytest

from kpdiag.bundle.store import Bundle
from kpdiag.state.node import NodeState
from tests.synth import Endpoint, Port, Service, iptables_ruleset, nft_ruleset
from kpdiag.trace.model import Packet

from .bundle_from_ns import bundle_from_ns
from .netlab import KernelTrace, KubeNodeLab, Sends, connect_from, kernel_fates, kernel_walk, send_packets, subsequence

pytestmark = pytest.mark.lab

CLIENT, NODE = "fd00:50::2", "fd00:50::1"
POD_NET, POD_GW = "fd00:244:1::", "fd00:244:1::1"
CIDR = "fd00:244::/32"


def _ipv6(lab, k: KubeNodeLab) -> dict[str, str]:
    """The lab's IPv6 side: client ⇄ node, pods on cni0; no duplicate address detection (addresses usable at once)."""
    for role in ["node", "client", *k.pods]:
        lab.sysctl(role, "net.ipv6.conf.all.disable_ipv6", "0")
    lab.sh("client", ["ip", "-6", "addr", "add", f"{CLIENT}/64", "dev", "eth0", "nodad"])
    lab.sh("node", ["ip", "-6", "addr", "add", f"{NODE}/64", "dev", "ext0", "nodad"])
    lab.sh("node", ["ip", "-6", "addr", "add", f"{POD_GW}/64", "dev", "cni0", "nodad"])
    lab.sh("client", ["ip", "-6", "route", "add", "default", "via", NODE])
    pods6 = {}
    for i, role in enumerate(k.pods):
        ip = f"{POD_NET}{10 + i:x}"
        lab.sh(role, ["ip", "-6", "addr", "add", f"{ip}/64", "dev", "eth0", "nodad"])
        lab.sh(role, ["ip", "-6", "route", "add", "default", "via", POD_GW])
        pods6[role] = ip
    lab.sysctl("node", "net.ipv6.conf.all.forwarding", "1")
    lab.sh("node", ["ip", "-6", "route", "add", "default", "via", CLIENT])  # a real node has a default route
    return pods6


@pytest.mark.parametrize("mode", ["iptables", "nftables"])
def test_kernel_agrees_with_tracer_on_ipv6(lab, tmp_path, capsys, mode):
    k = KubeNodeLab.build(lab, pod_count=5)
    pods = _ipv6(lab, k)
    ips = list(pods.values())
    services = [
        Service("shop", "web", "fd00:10:96::10", [Port("http", 80, 8080)], [Endpoint(ip) for ip in ips[:3]]),
        Service("shop", "dns", "fd00:10:96::11", [Port("dns", 53, 5353, "udp")], [Endpoint(ips[1])]),
        Service("shop", "empty", "fd00:10:96::12", [Port("http", 80, 8080)], []),
        Service(
            "shop",
            "agent",
            "fd00:10:96::13",
            [Port("http", 80, 8080)],
            [Endpoint(ips[2], local=True), Endpoint("fd00:244:2::9")],
            itp_local=True,
        ),
        Service(
            "shop", "probe", "fd00:10:96::14", [Port("http", 80, 8080)], [Endpoint("fd00:244:2::a")], itp_local=True
        ),
    ]
    if mode == "iptables":
        lab.sh("node", ["ip6tables-restore"], input=iptables_ruleset(services, cluster_cidr=CIDR))
    else:  # kube-proxy's IPv6 table: ip6 kube-proxy
        k.load_nft(nft_ruleset(services, cluster_cidr=CIDR, service_cidr="fd00:10:96::/112", node_ips=(NODE,)))

    sends = Sends()
    add = sends.add

    add("external", CLIENT, "fd00:10:96::10", 80, repeat=12)
    add("pod", ips[4], "fd00:10:96::10", 80, repeat=6)
    add("external", CLIENT, "fd00:10:96::11", 53, proto="udp", repeat=2)
    add("external", CLIENT, "fd00:10:96::12", 80)  # no endpoints: REJECT (icmp6-port-unreachable)
    add("pod", ips[4], "fd00:10:96::13", 80, repeat=2)  # internalTrafficPolicy: Local, one endpoint here
    add("pod", ips[4], "fd00:10:96::14", 80)  # … none here: DROP
    add("node", NODE, "fd00:10:96::10", 80, repeat=4)  # the node's own socket: OUTPUT

    with KernelTrace(lab, "node", family="ip6") as kt:
        send_packets(lab, "client", sends.of("external"), wait=0.05)
        send_packets(lab, "pod4", sends.of("pod"), wait=0.05)
        connect_from(lab, "node", [dict(p, bind=NODE) for o, p in sends if o == "node"])
        fates = kernel_fates(kt.events())

    bundle_dir = bundle_from_ns(lab, "node", str(tmp_path / "bundle"), ipv6=True)
    state = NodeState(Bundle.open(bundle_dir))
    tracer = state.mode_tracer(mode, family=6)
    assert tracer is not None
    want = {("fd00:10:96::10", 80): {f"[{ip}]:8080" for ip in ips[:3]}, ("fd00:10:96::13", 80): {f"[{ips[2]}]:8080"}}
    seen: dict[tuple, set] = {}
    for origin, p in sends:
        fate = fates.get(p["sport"])
        assert fate is not None, f"the kernel traced no packet with sport {p['sport']} ({p})"
        result = tracer.trace(Packet(p["src"], p["dst"], p["proto"], p["dport"], sport=p["sport"], origin=origin))
        assert sum(x.probability for x in result.paths) == pytest.approx(1.0)
        assert not result.uncertain, [x.notes for x in result.paths]
        if (p["dst"], p["dport"]) in want:
            assert result.dnat_set() == want[(p["dst"], p["dport"])]
        match = [x for x in result.paths if x.dnat == fate.dnat_to]
        assert match, (p, fate.dnat_to, result.dnat_set(), "\n".join(fate.lines))
        path = match[0]
        assert path.verdict == fate.verdict, (p, path.verdict, fate.lines)
        if path.verdict == "accept":
            assert path.masquerade == fate.masquerade, (p, "\n".join(fate.lines))
        ours = [(s.table.split()[-1], s.chain) for s in path.steps if s.rule is not None]
        if mode == "iptables":
            assert ours == kernel_walk(fate.lines), (p, fate.lines)
        else:
            assert subsequence(kernel_walk(fate.lines), ours), (p, "\n".join(fate.lines))
        seen.setdefault((p["dst"], p["dport"]), set()).add(fate.dnat_to)
    pod_fates = [fates[p["sport"]] for p in sends.of("pod") if fates[p["sport"]].verdict == "accept"]
    assert pod_fates and not any(f.masquerade for f in pod_fates)  # pods are inside the cluster CIDR: source kept
    by = {(p["dst"], p["dport"]): fates[p["sport"]] for _, p in sends}
    assert by[("fd00:10:96::12", 80)].verdict == "reject" and by[("fd00:10:96::14", 80)].verdict == "drop"
    assert len(seen[("fd00:10:96::10", 80)]) > 1  # the kernel really spread the load
    assert seen[("fd00:10:96::13", 80)] == {f"[{ips[2]}]:8080"}
    # the command line picks the ip6tables rules for an IPv6 destination, from the same bundle
    from kpdiag.cli import main

    assert (
        main(
            [
                "trace",
                "--bundle",
                bundle_dir,
                "--mode",
                mode,
                "--src",
                CLIENT,
                "--dst",
                "fd00:10:96::10",
                "--dport",
                "80",
                "-o",
                "json",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "trace",
                "--bundle",
                bundle_dir,
                "--mode",
                mode,
                "--from",
                "node",
                "--dst",
                "fd00:10:96::14",
                "--dport",
                "80",
            ]
        )
        == 4
    )  # dropped
    out = capsys.readouterr().out
    assert f'"dnat": "[{ips[0]}]:8080"' in out and "[fd00:50::1]:40000 -> [fd00:10:96::14]:80" in out
    assert (
        "kube-proxy drops it: shop/probe:http has internalTrafficPolicy: Local"
        if mode == "iptables"
        else "kube-proxy drops it: the Service's traffic policy is Local"
    ) in out
    # kube-proxy's IPv6 rules (ip6tables-save, the ip6 table) are in the node's programmed table too
    from kpdiag.state import programmed

    local: set[str] = set()
    table = programmed.decode(programmed.summary(state), local)
    assert table["fd00:10:96::10:80/tcp"][2] == 3 and local == {"fd00:10:96::13:80/tcp", "fd00:10:96::14:80/tcp"}

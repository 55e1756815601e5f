"""The kernel as oracle for routing failures: what a client gets back (an ICMP error at once, or nothing) when the node
has no route to the destination, an unreachable / prohibit / blackhole route, or DNATs a Service to an address it
cannot route to — in the iptables and the nftables mode — and what the node's own connect() gets. kpdiag's trace of
the namespace's bundle must say the same: the verdict (reject / drop / accept) and the ICMP error or errno."""

import json
import sys

import pytest

from kpdiag import exitcodes
from kpdiag.bundle.store import Bundle
from kpdiag.state.node import NodeState
from kpdiag.trace.model import Packet
from kpdiag.trace.netfilter import IptablesTracer
from kpdiag.trace.nftables import NftTracer
from tests.synth import Endpoint, Port, Service, iptables_ruleset, nft_ruleset

from .bundle_from_ns import bundle_from_ns
from .netlab import KubeNodeLab

pytestmark = pytest.mark.lab

# ICMP destination-unreachable codes as iptables names them (REJECT --reject-with)
ICMP_NAMES = {
    0: "icmp-net-unreachable",
    1: "icmp-host-unreachable",
    3: "icmp-port-unreachable",
    13: "icmp-admin-prohibited",
}

PROBE = """
import json, sys, time
from scapy.all import IP, TCP, ICMP, sr1, conf
conf.verb = 0
out = []
for dst, dport, sport in json.loads(sys.argv[1]):
    time.sleep(1.1)  # the kernel rate-limits its ICMP errors per source (ip_rt_error_cost: one a second after a burst)
    ans = sr1(IP(dst=dst) / TCP(sport=sport, dport=dport, flags="S"), timeout=1.0)
    if ans is None:
        out.append(None)
    elif ans.haslayer(ICMP):
        out.append(["icmp", int(ans[ICMP].type), int(ans[ICMP].code)])
    elif ans.haslayer(TCP):
        out.append(["tcp", str(ans[TCP].flags)])
    else:
        out.append(["other", ans.summary()])
print(json.dumps(out))
"""

CONNECT = """
import errno, json, socket, sys
out = []
for dst, dport in json.loads(sys.argv[1]):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(1.5)
    try:
        s.connect((dst, dport))
        out.append("connected")
    except socket.timeout:
        out.append("timeout")
    except OSError as exc:
        out.append(errno.errorcode.get(exc.errno, str(exc.errno)))
    finally:
        s.close()
print(json.dumps(out))
"""

# (destination, port, what the test expects the kernel to do — kpdiag must then agree with the kernel)
FORWARDED = [
    ("10.99.0.1", 80),  # no route at all (the node has no default route)
    ("10.50.0.1", 80),  # an unreachable route
    ("10.51.0.1", 80),  # a prohibit route
    ("10.52.0.1", 80),  # a blackhole route
    ("10.96.0.30", 80),  # a Service whose only endpoint the node cannot route to
    ("10.96.0.31", 80),  # a Service with a reachable pod (control: delivered)
]
LOCAL = [("10.99.0.1", 80), ("10.50.0.1", 80), ("10.51.0.1", 80), ("10.52.0.1", 80)]


def _build(lab, mode):
    k = KubeNodeLab.build(lab, pod_count=1)
    pod = k.pods["pod0"]
    lab.sh("pod0", [sys.executable, "-c", "pass"])
    for kind, prefix in (("unreachable", "10.50.0.0/16"), ("prohibit", "10.51.0.0/16"), ("blackhole", "10.52.0.0/16")):
        lab.route("node", kind, prefix)
    services = [
        Service("shop", "gone", "10.96.0.30", [Port("http", 80, 8080)], [Endpoint("10.99.0.5")]),
        Service("shop", "web", "10.96.0.31", [Port("http", 80, 8080)], [Endpoint(pod)]),
    ]
    if mode == "iptables":
        k.load_iptables(iptables_ruleset(services))
    else:
        k.load_nft(nft_ruleset(services, node_ips=("192.168.50.1",)))
    return k


def _kernel_forwarded(lab, k):
    probes = [[dst, dport, 42000 + n] for n, (dst, dport) in enumerate(FORWARDED)]
    out = json.loads(lab.sh("client", [sys.executable, "-c", PROBE, json.dumps(probes)], timeout=120).stdout)
    fates = []
    for answer in out:
        if answer is None:
            fates.append(("drop", None))
        elif answer[0] == "icmp" and answer[1] == 3:
            fates.append(("reject", ICMP_NAMES.get(answer[2], f"icmp code {answer[2]}")))
        elif answer[0] == "tcp":
            fates.append(("accept", None))  # a SYN-ACK or RST from the pod: delivered
        else:
            fates.append(("?", answer))
    return fates


@pytest.mark.parametrize("mode", ["iptables", "nftables"])
def test_kernel_and_trace_agree_on_routing_failures(lab, tmp_path, mode):
    k = _build(lab, mode)
    # something answers on the pod so that the delivered control gets a TCP answer (RST from a closed port is fine)
    kernel = _kernel_forwarded(lab, k)
    local = json.loads(
        lab.sh("node", [sys.executable, "-c", CONNECT, json.dumps([list(x) for x in LOCAL])], timeout=60).stdout
    )
    state = NodeState(Bundle.open(bundle_from_ns(lab, "node", str(tmp_path / "b"))))
    tracer = (
        IptablesTracer(state.iptables(), state.routing, state.ipsets)
        if mode == "iptables"
        else NftTracer(state.nft(), state.routing)
    )
    # what the kernel did, as measured (the documentation of these facts)
    assert kernel == [
        ("reject", "icmp-net-unreachable"),
        ("reject", "icmp-host-unreachable"),
        ("reject", "icmp-admin-prohibited"),
        ("drop", None),
        ("reject", "icmp-net-unreachable"),
        ("accept", None),
    ], kernel
    assert local == ["ENETUNREACH", "EHOSTUNREACH", "EACCES", "EINVAL"], local
    for (dst, dport), (verdict, icmp) in zip(FORWARDED, kernel):
        result = tracer.trace(Packet(k.client_ip, dst, "tcp", dport, iif="ext0"))
        assert result.complete, result.notes
        assert {(p.verdict, p.reject_with) for p in result.paths} == {(verdict, icmp)}, (dst, result.paths)
        want = {
            "accept": exitcodes.TRACE_DELIVERED,
            "drop": exitcodes.TRACE_DROPPED,
            "reject": exitcodes.TRACE_REJECTED,
        }
        assert exitcodes.for_trace(result.verdicts(), result.complete) == want[verdict]
        if verdict == "accept":
            assert result.paths[0].route["dev"] == "cni0"
    for (dst, dport), err in zip(LOCAL, local):
        result = tracer.trace(Packet("192.168.50.1", dst, "tcp", dport, origin="node"))
        assert {(p.verdict, p.reject_with) for p in result.paths} == {("reject", err)}, (dst, result.paths)


PROBE6 = """
import json, sys, time
from scapy.all import IPv6, TCP, ICMPv6DestUnreach, sr1, conf
conf.verb = 0
out = []
for dst in json.loads(sys.argv[1]):
    time.sleep(1.1)
    ans = sr1(IPv6(dst=dst) / TCP(dport=80, flags="S"), timeout=1.0)
    out.append(None if ans is None else int(ans[ICMPv6DestUnreach].code) if ans.haslayer(ICMPv6DestUnreach) else -1)
print(json.dumps(out))
"""


def test_kernel_and_trace_agree_on_ipv6_routing_failures(lab):
    from kpdiag.parse.iptables import parse_iptables_save
    from kpdiag.trace.routing import routing_from_ip_json

    lab.add_ns("client")
    lab.add_ns("node")
    lab.veth("client", "eth0", "node", "ext0")
    lab.sh("client", ["ip", "addr", "add", "fd00:50::2/64", "dev", "eth0", "nodad"])
    lab.sh("node", ["ip", "addr", "add", "fd00:50::1/64", "dev", "ext0", "nodad"])
    lab.sh("client", ["ip", "-6", "route", "add", "default", "via", "fd00:50::1"])
    lab.sysctl("node", "net.ipv6.conf.all.forwarding", "1")
    for kind, prefix in (("unreachable", "fd00:51::/64"), ("prohibit", "fd00:52::/64"), ("blackhole", "fd00:53::/64")):
        lab.sh("node", ["ip", "-6", "route", "add", kind, prefix])
    dsts = ["fd00:99::1", "fd00:51::1", "fd00:52::1", "fd00:53::1"]
    codes = json.loads(lab.sh("client", [sys.executable, "-c", PROBE6, json.dumps(dsts)], timeout=60).stdout)
    assert codes == [0, 0, 1, None], codes  # no route / unreachable: code 0 (no route), prohibit: 1, blackhole: none
    names = {0: "icmp6-no-route", 1: "icmp6-adm-prohibited"}
    addrs = json.loads(lab.sh("node", ["ip", "-j", "addr"]).stdout)
    routes = json.loads(lab.sh("node", ["ip", "-6", "-j", "route", "show", "table", "all"]).stdout)
    empty = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"
    tracer = IptablesTracer(parse_iptables_save(empty, "ip6tables-save"), routing_from_ip_json(addrs, routes))
    for dst, code in zip(dsts, codes):
        (path,) = tracer.trace(Packet("fd00:50::2", dst, "tcp", 80, iif="ext0")).paths
        want = ("drop", None) if code is None else ("reject", names[code])
        assert (path.verdict, path.reject_with) == want, (dst, path)


@pytest.mark.parametrize("mode", ["iptables", "nftables"])
def test_the_nodes_own_packet_dnated_to_an_unroutable_endpoint_times_out(lab, tmp_path, mode):
    """The first route lookup (connect) succeeds — the ClusterIP is routed — and the one after DNAT in OUTPUT fails:
    the kernel drops the SYN without an error to the socket; TCP retries until connect() times out."""
    k = KubeNodeLab.build(lab, pod_count=1)
    lab.route("node", "10.96.0.0/16", "dev", "ext0")
    services = [Service("shop", "gone", "10.96.0.30", [Port("http", 80, 8080)], [Endpoint("10.99.0.5")])]
    if mode == "iptables":
        k.load_iptables(iptables_ruleset(services))
    else:
        k.load_nft(nft_ruleset(services, node_ips=("192.168.50.1",)))
    got = json.loads(
        lab.sh("node", [sys.executable, "-c", CONNECT, json.dumps([["10.96.0.30", 80]])], timeout=60).stdout
    )
    assert got == ["timeout"], got
    state = NodeState(Bundle.open(bundle_from_ns(lab, "node", str(tmp_path / "b"))))
    tracer = (
        IptablesTracer(state.iptables(), state.routing, state.ipsets)
        if mode == "iptables"
        else NftTracer(state.nft(), state.routing)
    )
    result = tracer.trace(Packet("192.168.50.1", "10.96.0.30", "tcp", 80, origin="node"))
    assert {(p.verdict, p.dnat) for p in result.paths} == {("drop", "10.99.0.5:8080")}, result.paths

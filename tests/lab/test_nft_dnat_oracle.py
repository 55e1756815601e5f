"""The kernel as oracle for every nft dnat form (the forms kube-proxy's nftables mode and common CNIs/firewalls write,
and those `nft -j` prints for maps, ranges, numgen and jhash): the ruleset of tests/trace/data/nft-dnat-forms.json
(recorded from this nft) is loaded into a namespace, real packets are sent, `nft monitor trace` shows where each one
went after DNAT (the packet as the forward/input hook sees it), and kpdiag's trace of `nft -j list ruleset` from the
same namespace must hold that destination on one of its paths — for numgen/jhash maps on the path of that branch,
for address ranges inside the range kpdiag names."""

import ipaddress
import re

import pytest

from kpdiag.bundle.store import Bundle
from kpdiag.state.node import NodeState
from kpdiag.trace.model import Packet
from kpdiag.trace.nftables import NftTracer

from .bundle_from_ns import bundle_from_ns
from .netlab import KernelTrace, KubeNodeLab, Sends, send_packets

pytestmark = pytest.mark.lab

RULESET = """table ip t {
  map m1 { type inet_service : inet_service; elements = { 80 : 8080, 443 : 8443 } }
  chain pre { type nat hook prerouting priority dstnat; policy accept;
    ip daddr 10.96.0.1 tcp dport 80 dnat to 10.244.1.10:tcp dport map { 80 : 8080, 443 : 8443 }
    ip daddr 10.96.0.2 tcp dport { 80, 8085 } dnat to 10.244.1.10:8080-8090
    ip daddr 10.96.0.3 dnat to numgen random mod 2 map { 0 : 10.244.1.10, 1 : 10.244.1.11 }
    ip daddr 10.96.0.4 dnat to 10.244.1.10-10.244.1.12
    ip daddr 10.96.0.5 tcp dport 80 dnat to 10.244.1.10-10.244.1.12:8080-8090
    ip daddr 10.96.0.6 dnat to ip daddr map { 10.96.0.6 : 10.244.1.13 }
    ip daddr 10.96.0.7 dnat ip to ip daddr . tcp dport map { 10.96.0.7 . 80 : 10.244.1.13 . 8080 }
    ip daddr 10.96.0.8 dnat to numgen inc mod 3 map { 0 : 10.244.1.10, 1-2 : 10.244.1.11 }
    ip daddr 10.96.0.9 tcp dport 80 dnat to 10.244.1.10:tcp dport map @m1
    ip daddr 10.96.0.10 dnat to jhash ip saddr . tcp sport mod 2 map { 0 : 10.244.1.10, 1 : 10.244.1.11 }
    ip daddr 10.96.0.11 dnat to 10.244.1.10 fully-random,persistent
    ip daddr 10.96.0.13 tcp dport 80 dnat ip to numgen random mod 2 map { 0 : 10.244.1.10 . 8080, 1 : 10.244.1.11 . 9090 }
    ip daddr 10.96.0.15 numgen random mod 100000000 vmap { 0 : accept, 1-99999999 : drop }
    meta l4proto tcp ip daddr 10.96.0.16 dnat to 10.244.1.12:8080
  }
  chain fwdchk { type filter hook forward priority filter; policy accept; counter; }
  chain inpchk { type filter hook input priority filter; policy accept; counter; }
}
"""

SENDS = [  # (dst, dport, repeat)
    ("10.96.0.1", 80, 1),
    ("10.96.0.2", 80, 1),
    ("10.96.0.2", 8085, 1),
    ("10.96.0.3", 80, 12),
    ("10.96.0.4", 80, 3),
    ("10.96.0.5", 80, 1),
    ("10.96.0.6", 80, 1),
    ("10.96.0.7", 80, 1),
    ("10.96.0.8", 80, 6),
    ("10.96.0.9", 80, 1),
    ("10.96.0.10", 80, 8),
    ("10.96.0.11", 80, 1),
    ("10.96.0.13", 80, 12),
    ("10.96.0.15", 80, 2),
    ("10.96.0.16", 80, 1),
]


def _kernel(groups):
    """sport → (destination after DNAT as ip:port, or None when the packet never reached forward/input)."""
    out = {}
    for lines in groups.values():
        sport, after = None, None
        for line in lines:
            p = re.search(r"ip (\S+) (\S+) packet: .*?ip daddr (\S+) .*?tcp sport (\d+) tcp dport (\d+)", line)
            if not p:
                continue
            table, chain, daddr, sp, dp = p.groups()
            sport = int(sp)
            if table == "t" and chain in ("fwdchk", "inpchk"):
                after = f"{daddr}:{dp}"
        if sport is not None:
            out[sport] = after if sport not in out or out[sport] is None else out[sport]
    return out


def _holds(dnat: str | None, seen: str) -> bool:
    """Does kpdiag's DNAT text (ip:port, or first-last:port for an address range) cover the kernel's ip:port?"""
    if dnat is None:
        return False
    host, _, port = dnat.rpartition(":")
    s_host, _, s_port = seen.rpartition(":")
    if "-" in port:
        lo, hi = port.split("-")
        ok_port = int(lo) <= int(s_port) <= int(hi)
    else:
        ok_port = port == s_port
    if "-" in host:
        lo, hi = (ipaddress.ip_address(x) for x in host.split("-"))
        return ok_port and lo <= ipaddress.ip_address(s_host) <= hi
    return ok_port and host == s_host


def test_kernel_agrees_with_every_nft_dnat_form(lab, tmp_path):
    k = KubeNodeLab.build(lab, pod_count=4)
    k.load_nft(RULESET)
    sends = Sends(first_sport=41000)
    for dst, dport, repeat in SENDS:
        sends.add("external", k.client_ip, dst, dport, repeat=repeat)
    with KernelTrace(lab, "node") as kt:
        send_packets(lab, "client", sends.of("external"), wait=0.03)
        kernel = _kernel(kt.events())
    state = NodeState(Bundle.open(bundle_from_ns(lab, "node", str(tmp_path / "b"))))
    tracer = NftTracer(state.nft(), state.routing)
    branches: dict[str, set] = {}
    for _, p in sends:
        assert p["sport"] in kernel, p
        seen = kernel[p["sport"]]
        result = tracer.trace(Packet(p["src"], p["dst"], "tcp", p["dport"], sport=p["sport"], iif="ext0"))
        assert sum(x.probability for x in result.paths) == pytest.approx(1.0)
        assert result.complete and not result.uncertain, result.notes
        if seen is None:  # dropped in prerouting (the numgen vmap's drop branch)
            assert "drop" in result.verdicts(), (p, result.paths)
            continue
        hit = [x for x in result.paths if x.verdict == "accept" and _holds(x.dnat, seen)]
        assert hit, (p, seen, [(x.dnat, x.probability) for x in result.paths])
        branches.setdefault(p["dst"], set()).add(seen)
    assert len(branches["10.96.0.3"]) == 2 and len(branches["10.96.0.13"]) == 2  # both numgen branches seen
    assert branches["10.96.0.13"] == {"10.244.1.10:8080", "10.244.1.11:9090"}
    assert kernel[41001] == "10.244.1.10:8080" and kernel[41002] == "10.244.1.10:8085"  # port range: kept if inside

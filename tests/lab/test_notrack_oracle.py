"""The kernel as oracle for NOTRACK (NodeLocal DNSCache, Cilium): a packet made untracked in raw PREROUTING
(`-j CT --notrack`, `-j NOTRACK`, nft `notrack`) has no conntrack entry, so the nat hooks let it pass without
consulting any nat chain — a DNAT rule for the same destination is never applied. `nft monitor trace` shows which
chains the packet went through and where it arrived; kpdiag's trace of the namespace's bundle must agree: one path,
delivered to the node itself, no DNAT, and the nat chains not on it."""

import re

import pytest

from kpdiag.bundle.store import Bundle
from kpdiag.state.node import NodeState
from kpdiag.trace.model import Packet
from kpdiag.trace.netfilter import IptablesTracer
from kpdiag.trace.nftables import NftTracer

from .bundle_from_ns import bundle_from_ns
from .netlab import KernelTrace, KubeNodeLab, Sends, send_packets

pytestmark = pytest.mark.lab

LOCAL_DNS = "169.254.20.10"

IPTABLES = """*raw
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A PREROUTING -d 169.254.20.10/32 -p udp -m udp --dport 53 -m comment --comment "NodeLocal DNS Cache: skip conntrack" -j {target}
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -d 169.254.20.10/32 -p udp -m udp --dport 53 -j DNAT --to-destination {pod}:53
-A PREROUTING -d 169.254.20.10/32 -p tcp -m tcp --dport 53 -j DNAT --to-destination {pod}:53
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -d 169.254.20.10/32 -p udp -m udp --dport 53 -j ACCEPT
-A INPUT -d 169.254.20.10/32 -p tcp -m tcp --dport 53 -j ACCEPT
-A FORWARD -d {pod}/32 -j ACCEPT
COMMIT
"""

NFT = """table ip nodelocal {{
  chain raw {{ type filter hook prerouting priority raw; policy accept;
    ip daddr 169.254.20.10 udp dport 53 notrack
  }}
  chain nat {{ type nat hook prerouting priority dstnat; policy accept;
    meta l4proto {{ tcp, udp }} ip daddr 169.254.20.10 th dport 53 dnat to {pod}:53
  }}
  chain input {{ type filter hook input priority filter; policy accept;
    ip daddr 169.254.20.10 th dport 53 accept
  }}
  chain forward {{ type filter hook forward priority filter; policy accept;
    ip daddr {pod} accept
  }}
}}
"""


def _walk(groups):
    """sport → (tables/chains the kernel traced, the hook the packet arrived at: 'input', 'forward' or None)."""
    out = {}
    for lines in groups.values():
        sport, chains, arrived = None, [], None
        for line in lines:
            m = re.search(r"(?:udp|tcp) sport (\d+)", line)
            if m and "packet:" in line:
                sport = int(m.group(1))
            c = re.match(r"ip (\S+) (\S+) (?:rule|policy|packet)", line)
            if c and c.group(1) != "kpdiag_oracle":
                chains.append((c.group(1), c.group(2)))
                if c.group(2) in ("INPUT", "input"):
                    arrived = "input"
                elif c.group(2) in ("FORWARD", "forward"):
                    arrived = "forward"
        if sport is not None:
            out[sport] = (chains, arrived)
    return out


@pytest.mark.parametrize("mode", ["CT --notrack", "NOTRACK", "nft notrack"])
def test_kernel_and_trace_agree_on_notrack(lab, tmp_path, mode):
    k = KubeNodeLab.build(lab, pod_count=1)
    pod = k.pods["pod0"]
    lab.addr("node", "lo", f"{LOCAL_DNS}/32")
    if mode.startswith("nft"):
        k.load_nft(NFT.format(pod=pod))
    else:
        k.load_iptables(IPTABLES.format(target=mode, pod=pod))
    sends = Sends(first_sport=41500)
    sends.add("external", k.client_ip, LOCAL_DNS, 53, proto="udp", repeat=2)  # untracked: delivered to the node
    sends.add("external", k.client_ip, LOCAL_DNS, 53, proto="tcp")  # tracked: the DNAT applies (control)
    with KernelTrace(lab, "node") as kt:
        send_packets(lab, "client", sends.of("external"), wait=0.05)
        kernel = _walk(kt.events())
    state = NodeState(Bundle.open(bundle_from_ns(lab, "node", str(tmp_path / "b"))))
    tracer = (
        NftTracer(state.nft(), state.routing)
        if mode.startswith("nft")
        else IptablesTracer(state.iptables(), state.routing, state.ipsets)
    )
    for _, p in sends:
        chains, arrived = kernel[p["sport"]]
        result = tracer.trace(Packet(p["src"], p["dst"], p["proto"], 53, sport=p["sport"], iif="ext0"))
        assert result.complete and not result.uncertain, result.notes
        (path,) = result.paths
        ours = {(s.table.split()[-1], s.chain) for s in path.steps if s.rule is not None}
        if p["proto"] == "udp":
            assert arrived == "input" and not any(t == "nat" or c == "nat" for t, c in chains), chains
            assert path.verdict == "accept" and path.delivery == "local" and path.dnat is None
            assert not any(t == "nat" or c == "nat" for t, c in ours)
        else:
            assert arrived == "forward", chains
            assert path.delivery == "forward" and path.dnat == f"{pod}:53"

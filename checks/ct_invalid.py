"""Connection tracking calls packets INVALID, and a rule drops them: long transfers through Services reset or stall."""

from __future__ import annotations

import re
from typing import Optional

from kpdiag import evidence as ev
from kpdiag.checkapi import check
from kpdiag.model import Evidence
from kpdiag.state.typed_node import ConntrackStats
from kpdiag.state.typed_proxy import KubeProxyRules, Nft

INVALID_MIN = 1000  # conntrack -S counts since boot: a handful is normal noise (late retransmissions, port scans)


def invalid_drop_rules(rules: KubeProxyRules | None, nft: Nft | None) -> list[Evidence]:
    """Rules that drop packets conntrack marks INVALID (kube-proxy's KUBE-FORWARD has one in iptables mode)."""
    out = []
    rs = rules.ruleset if rules is not None else None
    if rs is not None:
        for chain_name in ("KUBE-FORWARD", "FORWARD", "INPUT"):
            chain = rs.chain("filter", chain_name)
            for pos, text in enumerate(chain.lines if chain is not None else []):
                if re.search(r"--ctstate (?:\S*,)?INVALID\b", text) and text.rstrip().endswith("-j DROP"):
                    out.append(ev.rule_at(chain, pos))
    if nft is not None and nft.text and '"invalid"' in nft.text:
        nrs = nft.ruleset()
        for nchain in nrs.chains.values() if nrs is not None else []:
            for rule in nchain.rules:
                text = rule.text if hasattr(rule, "text") else ""
                if "ct state invalid" in text and text.rstrip().endswith("drop"):
                    out.append(ev.nft_rule(nrs, nchain, rule))
    return out


@check(
    "KP510",
    "conntrack-invalid-drops",
    "Packets conntrack calls INVALID are dropped",
    "warning",
    symptom="Long-lived or high-throughput connections through Services reset or stall now and then (large downloads, "
    "streaming, database replication); short requests work.",
    why="""
        conntrack marks a packet INVALID when it does not fit the connection's state as conntrack tracks it — most
        often a TCP segment outside the window it expects (after packet loss, reordering, window scaling it missed,
        or a retransmission after its entry was refreshed). kube-proxy drops INVALID packets in KUBE-FORWARD
        (-m conntrack --ctstate INVALID -j DROP), and hosts often do the same. A dropped in-window-but-unexpected
        segment is never delivered; the peers retransmit until they give up and reset. With
        net.netfilter.nf_conntrack_tcp_be_liberal = 0 conntrack is strict about the window; setting it to 1 (or
        kube-proxy's conntrack.tcpBeLiberal) stops it from marking out-of-window segments INVALID.
    """,
    fix="Set net.netfilter.nf_conntrack_tcp_be_liberal=1 (kube-proxy ≥ 1.29: conntrack.tcpBeLiberal: true in its "
    "configuration), and find the packet loss or reordering behind it.",
)
def conntrack_invalid(
    new, conntrack: ConntrackStats, rules: Optional[KubeProxyRules] = None, nft: Optional[Nft] = None
):
    stats = conntrack.stats
    if not stats or "invalid" not in stats:
        return  # no conntrack -S counters (the table-size sysctls alone say nothing of INVALID packets)
    invalid = stats.get("invalid", 0)
    if invalid < INVALID_MIN:
        return
    liberal = conntrack.sysctl("net.netfilter.nf_conntrack_tcp_be_liberal")
    if liberal is not None and liberal.value.strip() == "1":
        return  # out-of-window TCP segments are not INVALID then: what is left is real garbage
    drops = invalid_drop_rules(rules, nft)
    if not drops:
        return  # INVALID packets are not dropped by a rule on this node
    yield new(
        f"conntrack has marked {invalid} packets INVALID since boot, nf_conntrack_tcp_be_liberal is "
        f"{liberal.value.strip() if liberal is not None else 'not known (default 0)'}, and {len(drops)} rule(s) drop INVALID packets: "
        "segments of live Service connections can be dropped, and those connections stall or reset",
        fix=(
            "conntrack -S | grep -o 'invalid=[0-9]*'   # run twice a minute apart: is it rising?",
            "sysctl -w net.netfilter.nf_conntrack_tcp_be_liberal=1   # and persist it in /etc/sysctl.d",
            "kube-proxy ≥ 1.29: conntrack: {tcpBeLiberal: true} in its ConfigMap, then restart it",
            "nstat -az | grep -iE 'retrans|OutOfWindow|TCPAckSkipped'   # the loss or reordering behind it",
        ),
        evidence=[conntrack.evidence("invalid", invalid)]
        + [e for e in (conntrack.sysctl_evidence("net.netfilter.nf_conntrack_tcp_be_liberal"),) if e]
        + drops[:2],
        subject="node",
        data={
            "stats": {"invalid": invalid},
            "drop_rules": len(drops),
            **conntrack.sysctl_data({"net.netfilter.nf_conntrack_tcp_be_liberal": 1}),
        },
    )

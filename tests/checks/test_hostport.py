"""KP530 (a pod's hostPort without portmap's DNAT on its node) and KP528 (UDP entries to a hostPort still DNATed to a
pod that no longer holds it), on a flannel node of the zoo (portmap implements hostPort there) and on CNIs that do
hostPort themselves (skipped, saying so). The kernel's side: tests/lab/test_hostport_oracle.py."""

from __future__ import annotations

import json

from tests import k8sobjects as k8s
from tests.given import base_text, given

BASE = "zoo-flannel-vxlan-docker"
NODE = "lab-zoo-flannel-vxlan-docker"
IPT = "node/iptables-save.txt"
CID = "5e6f7a8b9c0d"


def _agent(ip="10.244.1.12", proto="UDP", node=NODE, **more):
    pod = k8s.pod("monitoring", "agent-x7k2p", ip, {"app": "agent"}, node=node)
    pod["spec"]["containers"][0]["ports"] = [
        {"name": "stats", "containerPort": 8125, "hostPort": 8125, "protocol": proto, **more}
    ]
    return pod


def portmap_rules(ip="10.244.1.12", proto="udp", port=8125, jump=True) -> str:
    """portmap's iptables rules for one pod (CNI plugins' portmap_iptables.go: CNI-HOSTPORT-DNAT from PREROUTING and
    OUTPUT, the pod's CNI-DN- chain with the mark rules and the DNAT), added to the base's nat table."""
    text = base_text(IPT, BASE)
    chain = "CNI-DN-1a2b3c4d5e6f7a8b9c0d1"
    decl = f":CNI-HOSTPORT-DNAT - [0:0]\n:{chain} - [0:0]\n:CNI-HOSTPORT-SETMARK - [0:0]\n"
    rules = (
        (
            '-A PREROUTING -m addrtype --dst-type LOCAL -m comment --comment "CNI portfwd requiring DNAT" '
            "-j CNI-HOSTPORT-DNAT\n"
            if jump
            else ""
        )
        + f'-A CNI-HOSTPORT-DNAT -p {proto} -m comment --comment "dnat name: \\"cbr0\\" id: \\"{CID}\\"" '
        f"-m multiport --dports {port} -j {chain}\n"
        f"-A {chain} -s 10.244.1.0/24 -p {proto} -m {proto} --dport {port} -j CNI-HOSTPORT-SETMARK\n"
        f"-A {chain} -s 127.0.0.1/32 -p {proto} -m {proto} --dport {port} -j CNI-HOSTPORT-SETMARK\n"
        f"-A {chain} -p {proto} -m {proto} --dport {port} -j DNAT --to-destination {ip}:{port}\n"
    )
    head, sep, rest = text.partition("*nat\n")
    first_rule = rest.index("\n-A ") + 1
    return head + sep + decl + rest[:first_rule] + rules + rest[first_rule:]


def test_a_hostport_pod_without_dnat_fires_with_the_pod_spec_and_the_missing_chain():
    (f,) = given(base=BASE, pods=[_agent()]).fires("KP530")
    assert f.severity == "error" and "hostPort 8125/UDP" in f.summary and "no CNI-HOSTPORT-DNAT chain" in f.summary
    assert "hostPort: 8125, containerPort: 8125, protocol: UDP" in f.evidence[0].text
    assert "nat: no chain CNI-HOSTPORT-DNAT" in f.evidence[1].text
    assert f.fix[0].startswith("kubectl -n monitoring delete pod agent-x7k2p")
    assert any("FirewallBackend=nftables" in s for s in f.fix)


def test_portmaps_rules_in_place_are_silent_and_a_lost_jump_fires():
    given(base=BASE, pods=[_agent()], iptables=portmap_rules()).silent("KP530")
    (f,) = given(base=BASE, pods=[_agent()], iptables=portmap_rules(jump=False)).fires("KP530")
    assert "nat PREROUTING no longer reaches" in f.summary and "DNAT --to-destination 10.244.1.12:8125" in (
        f.evidence[1].text
    )


def test_other_nodes_pods_and_host_network_pods_are_not_judged():
    given(base=BASE, pods=[_agent(node="node-b")]).silent("KP530")
    pod = _agent()
    pod["spec"]["hostNetwork"] = True
    given(base=BASE, pods=[pod]).silent("KP530")


def test_cnis_that_do_hostport_themselves_are_skipped_with_the_reason():
    assert "implements hostPort in its BPF programs" in given(
        base="zoo-cilium-kpr", pods=[_agent(node="lab-zoo-cilium-kpr")]
    ).skips("KP530")
    reason = given(
        base="zoo-calico-ebpf",
        pods=[_agent(node="lab-zoo-calico-ebpf")],
        files={"node/conntrack.txt": _ct("10.244.1.11")},
    ).skips("KP528")
    assert "Calico (eBPF dataplane) implements hostPort in its BPF programs" in reason
    plain = given(pods=[_agent(node="lab-healthy-iptables")])  # the plain cni0 lab node: no CNI recognised
    assert "not recognised" in plain.skips("KP530")
    # where no pod has a hostPort the case cannot arise, whatever the CNI: silent, not skipped
    given(pods=[k8s.pod("shop", "web-0", "10.244.1.10", {"app": "web"}, node="lab-healthy-iptables")]).silent("KP530")


def _ct(reply_src: str) -> str:
    return (
        "udp      17 29 src=192.168.50.2 dst=192.168.50.1 sport=40125 dport=8125 [UNREPLIED] "
        f"src={reply_src} dst=10.244.1.1 sport=8125 dport=40125 mark=0 use=1\n"
    )


def test_a_udp_hostport_entry_to_the_old_pod_fires_kp528():
    g = given(base=BASE, pods=[_agent()], iptables=portmap_rules(), files={"node/conntrack.txt": _ct("10.244.1.11")})
    (f,) = g.fires("KP528")
    assert f.fix == ("conntrack -D -p udp --orig-port-dst 8125 --reply-src 10.244.1.11",)
    assert "dport=8125" in f.evidence[0].text and f.data["stale_endpoints"] == ["10.244.1.11"]
    given(base=BASE, pods=[_agent()], files={"node/conntrack.txt": _ct("10.244.1.12")}).silent("KP528")
    given(base=BASE, pods=[_agent(proto="TCP")], files={"node/conntrack.txt": _ct("10.244.1.11")}).silent("KP528")


def test_portmaps_rules_in_the_other_iptables_backend_count_and_ipv6_pods_are_left_out():
    legacy = {"node/iptables-legacy-save.txt": portmap_rules()}
    given(base=BASE, pods=[_agent()], files=legacy).silent("KP530")  # go-iptables used the legacy binary
    given(base=BASE, pods=[_agent(ip="fd00:244:1::c")]).silent("KP530")  # ip6tables: not read


# portmap's nftables backend (portmap_nftables.go): table ip cni_hostport, as `nft -j list ruleset` printed it once
# loaded on the kernel (a rule per mapping in chain hostports, the container ID its comment)
PORTMAP_NFT = {
    "nftables": [
        {"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", "json_schema_version": 1}},
        {"table": {"family": "ip", "name": "cni_hostport", "handle": 1}},
        {"chain": {"family": "ip", "table": "cni_hostport", "name": "hostports", "handle": 1}},
        {"chain": {"family": "ip", "table": "cni_hostport", "name": "hostip_hostports", "handle": 2}},
        {
            "chain": {
                "family": "ip",
                "table": "cni_hostport",
                "name": "prerouting",
                "handle": 3,
                "type": "nat",
                "hook": "prerouting",
                "prio": -100,
                "policy": "accept",
            }
        },
        {
            "rule": {
                "family": "ip",
                "table": "cni_hostport",
                "chain": "hostports",
                "handle": 4,
                "comment": "abc123",
                "expr": [
                    {"match": {"op": "==", "left": {"payload": {"protocol": "udp", "field": "dport"}}, "right": 8125}},
                    {"dnat": {"addr": "10.244.1.12", "port": 8125}},
                ],
            }
        },
        {
            "rule": {
                "family": "ip",
                "table": "cni_hostport",
                "chain": "prerouting",
                "handle": 5,
                "expr": [{"jump": {"target": "hostip_hostports"}}],
            }
        },
        {
            "rule": {
                "family": "ip",
                "table": "cni_hostport",
                "chain": "prerouting",
                "handle": 6,
                "expr": [{"jump": {"target": "hostports"}}],
            }
        },
    ]
}


def test_portmaps_nftables_backend_counts():
    given(base=BASE, pods=[_agent()], files={"node/nft-ruleset.json": PORTMAP_NFT}).silent("KP530")
    other_port = json.loads(json.dumps(PORTMAP_NFT).replace("8125", "8126"))
    given(base=BASE, pods=[_agent()], files={"node/nft-ruleset.json": other_port}).fires("KP530")

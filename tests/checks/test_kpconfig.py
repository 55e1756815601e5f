"""kube-proxy's effective configuration judged against the node (checks/kpconfig.py), given() cases."""

from __future__ import annotations

from kpdiag.bundle import sources
from tests.given import base_text, given, node

LOG = sources.KP_LOG


def _svc(name: str, kind: str = "NodePort") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"namespace": "shop", "name": name},
        "spec": {"type": kind, "clusterIP": "10.96.0.40", "ports": [{"port": 80, "nodePort": 30080}]},
    }


# ---- KP720 nodePortAddresses


def test_nodeport_addresses_of_another_subnet_fire():
    (f,) = given(kube_proxy={"nodePortAddresses": ["10.0.9.0/24"]}).fires("KP720")
    assert f.severity == "error" and "10.0.9.0/24" in f.summary and "192.168.50.1 (ext0)" in f.summary
    assert f.evidence[0].source == sources.KP_CONFIG and f.evidence[0].text.startswith("nodePortAddresses:")
    assert f.data["family"] == 4


def test_nodeport_addresses_name_the_services_that_lose_their_nodeport():
    (f,) = given(kube_proxy={"nodePortAddresses": ["10.0.9.0/24"]}, services=[_svc("front")]).fires("KP720")
    assert f.severity == "error" and "shop/front" in f.summary
    (f,) = given(kube_proxy={"nodePortAddresses": ["10.0.9.0/24"]}, services=[]).fires("KP720")
    assert f.severity == "warning"


def test_nodeport_addresses_that_contain_the_node_are_silent():
    given(kube_proxy={"nodePortAddresses": ["192.168.50.0/24"]}).silent("KP720")
    given().silent("KP720")  # unset: every local address
    # an IPv6 CIDR on a node without a global IPv6 address: nothing to serve there, nothing lost
    given(kube_proxy={"nodePortAddresses": ["192.168.50.0/24", "fd00:99::/64"]}).silent("KP720")


def test_nodeport_addresses_from_a_flag():
    cmd = "kube-proxy\n--nodeport-addresses=172.16.0.0/12\n"
    (f,) = given(files={sources.KP_CMDLINE: cmd}).fires("KP720")
    assert (f.evidence[0].source, f.evidence[0].line) == (sources.KP_CMDLINE, 2)


def test_primary_with_loopback_fires_and_with_the_node_ip_is_silent():
    loop = "I0101 1 server.go:1] \"Can't determine this node's IP, assuming loopback; if this is incorrect, please set the --bind-address flag\"\n"
    (f,) = given(kube_proxy={"nodePortAddresses": ["primary"]}, files={LOG: loop}).fires("KP720")
    assert "loopback" in f.summary and f.evidence[1].source == LOG
    ok = 'I0101 1 server.go:1] "Successfully retrieved NodeIPs" NodeIPs=["192.168.50.1"]\n'
    given(kube_proxy={"nodePortAddresses": ["primary"]}, files={LOG: ok}).silent("KP720")
    other = 'I0101 1 server.go:1] "Successfully retrieved NodeIPs" NodeIPs=["10.1.1.1"]\n'
    (f,) = given(kube_proxy={"nodePortAddresses": ["primary"]}, files={LOG: other}).fires("KP720")
    assert "10.1.1.1" in f.summary
    assert "does not say" in given(kube_proxy={"nodePortAddresses": ["primary"]}).skips("KP720")


# ---- KP721 detectLocalMode by interface


def _config(extra: str) -> dict:
    return {sources.KP_CONFIG: base_text(sources.KP_CONFIG).replace('detectLocalMode: ""\n', "") + extra}


def test_bridge_interface_the_node_does_not_have_fires():
    cfg = _config("detectLocalMode: BridgeInterface\ndetectLocal:\n  bridgeInterface: cbr0\n")
    (f,) = given(files=cfg).fires("KP721")
    assert "cbr0" in f.summary and "cni0" in f.summary and f.data["bridges"] == ["cni0"]
    assert [e.text for e in f.evidence[:2]] == ["detectLocalMode: BridgeInterface", "bridgeInterface: cbr0"]
    assert [e.line for e in f.evidence[:2]] == [21, 23]
    assert 'bridgeInterface: "cni0"' in f.fix[1]


def test_interface_prefix_that_matches_no_interface_fires_from_flags():
    cmd = "kube-proxy\n--detect-local-mode=InterfaceNamePrefix\n--pod-interface-name-prefix=cali\n"
    (f,) = given(files={sources.KP_CMDLINE: cmd}).fires("KP721")
    assert (f.evidence[1].source, f.evidence[1].line) == (sources.KP_CMDLINE, 3)


def test_an_interface_that_is_there_is_silent():
    given(kube_proxy={"detectLocalMode": "BridgeInterface", "detectLocal": {"bridgeInterface": "cni0"}}).silent("KP721")
    given(kube_proxy={"detectLocalMode": "InterfaceNamePrefix", "detectLocal": {"interfaceNamePrefix": "veth"}}).silent(
        "KP721"
    )
    given().silent("KP721")  # ClusterCIDR: not this check's


# ---- KP722 masqueradeAll


def _policy(name: str, peer: dict) -> dict:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"namespace": "shop", "name": name},
        "spec": {"podSelector": {}, "ingress": [{"from": [peer]}]},
    }


def test_masquerade_all_is_said_and_where_it_is_set():
    cfg = _config("").get(sources.KP_CONFIG).replace("  masqueradeAll: false", "  masqueradeAll: true")
    (f,) = given(files={sources.KP_CONFIG: cfg}).fires("KP722")
    assert f.severity == "info" and (f.evidence[0].text, f.evidence[0].line) == ("masqueradeAll: true", 13)


def test_masquerade_all_with_pod_selecting_policies_is_a_warning():
    cmd = "kube-proxy\n--masquerade-all\n"
    pols = {
        sources.NETWORKPOLICIES: {
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                _policy("from-front", {"podSelector": {"matchLabels": {"app": "front"}}}),
                _policy("cidr", {"ipBlock": {"cidr": "10.0.0.0/8"}}),
            ],
        }
    }
    (f,) = given(files={sources.KP_CMDLINE: cmd, **pols}).fires("KP722")
    assert f.severity == "warning" and f.data["policies"] == ["shop/from-front"] and f.evidence[0].line == 2


def test_masquerade_all_false_or_the_other_modes_section_is_silent():
    given().silent("KP722")
    # nftables mode reads nftables.masqueradeAll: iptables.masqueradeAll true does not count there
    cfg = _config("").get(sources.KP_CONFIG).replace("  masqueradeAll: false", "  masqueradeAll: true")
    given(files={sources.KP_CONFIG: cfg.replace('mode: "iptables"', 'mode: "nftables"')}).silent("KP722")


# ---- KP723 single-stack kube-proxy on a dual-stack cluster

SINGLE = (
    'I0101 00:00:01.1 1 server_linux.go:1] "No iptables support for family" ipFamily="IPv6"\n'
    'I0101 00:00:01.2 1 server.go:1] "kube-proxy running in single-stack mode" ipFamily="IPv4"\n'
)
DUAL_NODE = [node("lab", "10.244.1.0/24", "fd00:244:1::/64")]


def test_single_stack_in_a_dual_stack_cluster_says_why_from_the_log():
    (f,) = given(files={LOG: SINGLE}, nodes=DUAL_NODE).fires("KP723")
    assert "IPv4 only" in f.summary and "ip6tables" in f.summary and f.data["cause"] == "iptables"
    assert [e.line for e in f.evidence[:2]] == [2, 1] and f.evidence[2].source == sources.NODES
    assert "ip6tables-save" in f.fix[0]


def test_kernel_without_ipv6_is_the_cause_said():
    log = 'I0101 1 server_linux.go:1] "No kernel support for family" ipFamily="IPv6"\n' + SINGLE.splitlines()[1]
    dual_svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"namespace": "shop", "name": "web"},
        "spec": {"clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20", "fd00:10:96::20"], "ports": [{"port": 80}]},
    }
    (f,) = given(files={LOG: log}, nodes=[node("lab", "10.244.1.0/24")], services=[dual_svc]).fires("KP723")
    assert f.data["cause"] == "kernel" and "ipv6.disable=1" in f.summary


def test_dual_stack_kube_proxy_or_single_stack_cluster_is_silent():
    dual = 'I0719 1 server.go:659] "kube-proxy running in dual-stack mode" primary ipFamily="IPv4"\n'
    given(files={LOG: dual}, nodes=DUAL_NODE).silent("KP723")
    given(files={LOG: SINGLE}, nodes=[node("lab", "10.244.1.0/24")]).silent("KP723")


def test_single_stack_skips_without_the_api_or_a_log_line():
    assert sources.NODES in given(files={LOG: SINGLE}).skips("KP723")
    assert "does not say" in given(nodes=DUAL_NODE).skips("KP723")


# ---- KP724 KUBE-MARK-* jumped to by other components

PORTMAP = [
    ":CNI-DN-1a2b3c - [0:0]",
    "-A CNI-DN-1a2b3c -s 10.244.1.10/32 -p tcp -m tcp --dport 8080 -j KUBE-MARK-MASQ",
    "-A CNI-DN-1a2b3c -s 127.0.0.1/32 -p tcp -m tcp --dport 8080 -j KUBE-MARK-MASQ",
    "-A CNI-DN-1a2b3c -p tcp -m tcp --dport 8080 -j DNAT --to-destination 10.244.1.10:80",
]


def _nat(text: str, chains: list[str], rules: list[str]) -> str:
    head, nat = text.split("*nat\n", 1)
    body, tail = nat.split("COMMIT\n", 1)
    return (
        head
        + "*nat\n"
        + "".join(c + "\n" for c in chains)
        + body
        + "".join(r + "\n" for r in rules)
        + "COMMIT\n"
        + tail
    )


def _ipt(chains, rules, drop_rules=()) -> str:
    text = base_text(sources.IPTABLES_SAVE)
    for r in drop_rules:
        assert r + "\n" in text
        text = text.replace(r + "\n", "")
    return _nat(text, chains, rules)


def test_portmap_jumps_to_kube_mark_masq_that_kube_proxy_masquerades_is_silent():
    given(iptables=_ipt(PORTMAP[:1], PORTMAP[1:])).silent("KP724")
    given().silent("KP724")


def test_portmap_jumps_to_an_emptied_kube_mark_masq_fires():
    """nftables mode: kube-proxy's start-up cleanup flushed KUBE-MARK-MASQ (it cannot delete a chain portmap still
    jumps to) and removed KUBE-POSTROUTING."""
    ipt = _ipt(PORTMAP[:1], PORTMAP[1:], drop_rules=["-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000"])
    (f,) = given(iptables=ipt).fires("KP724")
    assert "CNI-DN-1a2b3c" in f.summary and "empty" in f.summary and f.data["rules"] == 2
    assert f.evidence[0].text.startswith("-A CNI-DN-1a2b3c -s 10.244.1.10/32") and f.evidence[0].line


def test_kube_mark_drop_without_a_drop_rule_fires():
    chains = [":KUBE-MARK-DROP - [0:0]", ":WEAVE-NPC-EGRESS - [0:0]"]
    rules = [
        "-A KUBE-MARK-DROP -j MARK --set-xmark 0x8000/0x8000",
        "-A WEAVE-NPC-EGRESS -d 10.0.0.0/8 -j KUBE-MARK-DROP",
    ]
    (f,) = given(iptables=_ipt(chains, rules)).fires("KP724")
    assert f.data["mark"] == "0x8000/0x8000" and "no rule drops" in f.summary
    # an old kubelet's KUBE-FIREWALL rule still drops the mark: the drop happens
    text = _ipt(chains, rules).replace(
        "-A KUBE-FIREWALL ! -s 127.0.0.0/8",
        '-A KUBE-FIREWALL -m comment --comment "kubernetes firewall for dropping marked packets" -m mark --mark 0x8000/0x8000 -j DROP\n-A KUBE-FIREWALL ! -s 127.0.0.0/8',
        1,
    )
    given(iptables=text).silent("KP724")

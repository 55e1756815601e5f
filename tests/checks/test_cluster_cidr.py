"""KP613: kube-proxy's clusterCIDR (10.244.0.0/16 in the base) against the pod CIDRs the API gave the nodes."""

from kpdiag.bundle.sources import IPTABLES_SAVE, KP_CONFIG
from tests.given import base_text, given, node


def test_a_node_pod_cidr_outside_cluster_cidr_fires():
    (f,) = given(nodes=[node("node-a", "10.244.1.0/24"), node("node-b", "10.245.0.0/24")]).fires("KP613")
    assert "node-b (10.245.0.0/24)" in f.summary and "node-a" not in f.summary
    assert f.data == {"cluster_cidr": ["10.244.0.0/16"], "outside": [{"node": "node-b", "pod_cidr": "10.245.0.0/24"}]}
    assert [e.text for e in f.evidence] == ["clusterCIDR: 10.244.0.0/16", "node node-b: podCIDRs 10.245.0.0/24"]


def test_pod_cidrs_inside_cluster_cidr_are_silent():
    given(nodes=[node("node-a", "10.244.1.0/24"), node("node-b", "10.244.2.0/24")]).silent("KP613")
    given(kube_proxy={"clusterCIDR": "10.0.0.0/8"}, nodes=[node("node-b", "10.245.0.0/24")]).silent("KP613")


def test_dual_stack_compares_each_family_clustercidr_names():
    nodes = [node("node-a", "10.244.1.0/24", "fd00:10:244:1::/64")]
    given(nodes=nodes).silent("KP613")  # no IPv6 clusterCIDR: that family is KP706's, not judged here
    (f,) = given(kube_proxy={"clusterCIDR": "10.244.0.0/16,fd00:99::/56"}, nodes=nodes).fires("KP613")
    assert f.data["outside"] == [{"node": "node-a", "pod_cidr": "fd00:10:244:1::/64"}]


def test_other_local_detection_is_silent_and_missing_facts_skip():
    outside = [node("node-b", "10.245.0.0/24")]
    given(kube_proxy={"detectLocalMode": "NodeCIDR"}, nodes=outside).silent("KP613")  # clusterCIDR not used
    no_masq = "".join(line for line in base_text(IPTABLES_SAVE).splitlines(True) if "! -s 10.244" not in line)
    assert "needs kube-proxy's clusterCIDR" in given(
        kube_proxy={"clusterCIDR": None}, iptables=no_masq, nodes=outside
    ).skips("KP613")
    assert "needs a node with a podCIDR" in given(nodes=[node("node-b")]).skips("KP613")
    assert "cluster/nodes.json" in given().skips("KP613")  # the base has no API objects


def test_a_replacement_in_charge_is_not_given_kube_proxy_advice():
    reason = given(base="cilium-kube-proxy-replacement", nodes=[node("node-b", "10.245.0.0/24")]).skips("KP613")
    assert "Cilium's kube-proxy replacement" in reason


def test_without_a_configuration_the_rules_say_the_cluster_cidr():
    # kube-proxy started with flags (k3s, --cluster-cidr): its "! -s 10.244.0.0/16 -j KUBE-MARK-MASQ" rules say it
    (f,) = given(files={KP_CONFIG: None}, nodes=[node("node-b", "10.245.0.0/24")]).fires("KP613")
    assert f.data["cluster_cidr"] == ["10.244.0.0/16"] and "! -s 10.244.0.0/16" in f.evidence[0].text
    assert f.evidence[0].source == "node/iptables-save.txt" and f.evidence[0].line
    given(files={KP_CONFIG: None}, nodes=[node("node-a", "10.244.1.0/24")]).silent("KP613")


def test_in_nftables_mode_without_a_configuration_kube_proxys_nft_rules_say_it():
    # the same in nftables mode: a service chain's "ip saddr != 10.244.0.0/16 jump mark-for-masquerade"
    outside = [node("node-b", "10.245.0.0/24")]
    (f,) = given(base="healthy-nftables", files={KP_CONFIG: None}, nodes=outside).fires("KP613")
    assert f.data["cluster_cidr"] == ["10.244.0.0/16"], f.data
    assert f.evidence[0].source == "node/nft-ruleset.json"
    assert "ip saddr != 10.244.0.0/16 jump mark-for-masquerade" in f.evidence[0].text, f.evidence[0]
    given(base="healthy-nftables", files={KP_CONFIG: None}, nodes=[node("node-a", "10.244.1.0/24")]).silent("KP613")
    # a configuration without clusterCIDR (the rules still show it) is read the same way, by KP603 too
    given(base="healthy-nftables", kube_proxy={"clusterCIDR": None}, nodes=outside).fires("KP613")
    given(base="healthy-nftables", kube_proxy={"clusterCIDR": None}).silent("KP603")


def _nft_masquerade_source(cidr: str) -> dict:
    """healthy-nftables' ruleset with its service chains' "ip saddr != 10.244.0.0/16 jump mark-for-masquerade" made
    "ip saddr != CIDR …": what kube-proxy writes with detectLocalMode NodeCIDR (CIDR: this node's own podCIDR, the
    same rule shape as ClusterCIDR; pkg/proxy/util's CIDR local detector serves both modes)."""
    import json

    from tests.given import base_files

    doc = json.loads(base_files("healthy-nftables")["node/nft-ruleset.json"])
    addr, length = cidr.split("/")
    for item in doc["nftables"]:
        rule = item.get("rule") or {}
        for e in rule.get("expr") or []:
            m = e.get("match") if isinstance(e, dict) else None
            if m and m.get("op") == "!=" and (m["left"].get("payload") or {}).get("field") == "saddr":
                m["right"] = {"prefix": {"addr": addr, "len": int(length)}}
    return {"node/nft-ruleset.json": json.dumps(doc)}


def test_node_cidr_mode_rules_without_a_configuration_are_no_cluster_cidr():
    # detectLocalMode NodeCIDR (kube-proxy's configuration not collected: flags, k3s): the service chains say
    # "ip saddr != 10.244.1.0/24" — this node's podCIDR, not a clusterCIDR. Every other node's podCIDR is outside
    # it by design: KP613 must not call them outside kube-proxy's clusterCIDR.
    nodes = [node("lab-healthy-nftables", "10.244.1.0/24"), node("node-b", "10.244.2.0/24")]
    files = {KP_CONFIG: None, **_nft_masquerade_source("10.244.1.0/24")}
    reason = given(base="healthy-nftables", files=files, nodes=nodes).skips("KP613")
    assert "10.244.1.0/24, a node's own podCIDR" in reason and "NodeCIDR" in reason, reason
    # the same from iptables rules ("! -s 10.244.1.0/24 -j KUBE-MARK-MASQ")
    rules = base_text(IPTABLES_SAVE).replace("! -s 10.244.0.0/16", "! -s 10.244.1.0/24")
    assert "! -s 10.244.1.0/24" in rules
    assert "NodeCIDR" in given(files={KP_CONFIG: None}, iptables=rules, nodes=nodes).skips("KP613")
    # a clusterCIDR read from the rules that is no node's podCIDR is judged as before
    files = {KP_CONFIG: None, **_nft_masquerade_source("10.244.0.0/17")}
    (f,) = given(base="healthy-nftables", files=files, nodes=[*nodes, node("node-c", "10.244.200.0/24")]).fires("KP613")
    assert f.data["outside"] == [{"node": "node-c", "pod_cidr": "10.244.200.0/24"}], f.data


def test_kp706_is_silent_when_kube_proxys_nft_rules_detect_local_traffic():
    # a configuration without clusterCIDR (flags set it) in nftables mode: the service chains still say
    # "ip saddr != 10.244.0.0/16 jump mark-for-masquerade" — KP613/KP603 read that clusterCIDR, so KP706 must not say
    # traffic from outside is not masqueraded (as with iptables rules: test_kube_proxy_cases.py)
    given(base="healthy-nftables", kube_proxy={"clusterCIDR": None}).silent("KP706")


def test_kp603_names_what_the_rules_hold_and_cites_the_rule():
    """KP603 without a configured clusterCIDR reads kube-proxy's rules: with detectLocalMode NodeCIDR they hold this
    node's own podCIDR, so the finding says so (and does not advise editing clusterCIDR, which that mode ignores);
    its evidence is the rule, not 'clusterCIDR is not set'."""
    files = _nft_masquerade_source("10.96.64.0/24")  # a podCIDR inside the Service range 10.96.0.0/12
    (f,) = given(
        base="healthy-nftables", kube_proxy={"clusterCIDR": None, "detectLocalMode": "NodeCIDR"}, files=files
    ).fires("KP603")
    assert f.summary.startswith("this node's podCIDR (kube-proxy's NodeCIDR rules) 10.96.64.0/24 overlaps"), f.summary
    assert not any("edit configmap" in c for c in f.fix), f.fix
    assert "ip saddr != 10.96.64.0/24 jump mark-for-masquerade" in f.evidence[0].text, f.evidence
    (f,) = given(base="healthy-nftables", kube_proxy={"clusterCIDR": None}, files=files).fires("KP603")
    assert f.summary.startswith("kube-proxy's clusterCIDR 10.96.64.0/24 overlaps"), f.summary
    rules = base_text(IPTABLES_SAVE).replace("! -s 10.244.0.0/16", "! -s 10.96.0.0/24")  # its ClusterIPs inside
    (f,) = given(kube_proxy={"clusterCIDR": None}, iptables=rules).fires("KP603")
    assert "! -s 10.96.0.0/24 -j KUBE-MARK-MASQ" in f.evidence[0].text and f.evidence[0].line, f.evidence

"""The NetworkPolicy rules one by one, on kpdiag.state.netpol directly (the truth tables go through the CLI)."""

from __future__ import annotations

import pytest

from kpdiag.state.netpol import End, Pod, PolicyError, parse_policies, parse_policy, parse_selector, recognise_cni
from kpdiag.state.netpol_eval import PolicyIndex, patch_doc, patch_yaml


def pod(ns, name, labels, ip, ports=(), host=False):
    return Pod(ns, name, labels, (ip,) if ip else (), host, tuple(ports))


A = pod("x", "a", {"pod": "a"}, "10.0.1.1", [("http", 8080, "TCP"), ("dns", 53, "UDP")])
B = pod("x", "b", {"pod": "b"}, "10.0.1.2", [("http", 9090, "TCP")])
C = pod("y", "c", {"pod": "c", "tier": "db"}, "10.0.2.3")
HOST = pod("x", "h", {"pod": "h"}, "192.168.0.5", host=True)
NS = [
    {"metadata": {"name": "x", "labels": {"team": "x"}}},
    {"metadata": {"name": "y", "labels": {"team": "y", "env": "prod"}}},
]


def np(ns, name, spec):
    return {"metadata": {"namespace": ns, "name": name}, "spec": spec}


def index(*policies):
    pols, problems = parse_policies(list(policies))
    assert not problems, problems
    return PolicyIndex(pols, NS, [A, B, C, HOST])


def flow(idx, src, dst, port, proto="TCP"):
    return idx.evaluate(
        src if isinstance(src, End) else End(src.ip, src),
        dst if isinstance(dst, End) else End(dst.ip, dst),
        port,
        proto,
    )


# ---------------------------------------------------------------- selection, isolation, defaulting
def test_no_policy_means_open_both_ways():
    f = flow(index(), B, A, 8080)
    assert f.allowed and not f.egress.restricted and not f.ingress.restricted


def test_policy_types_default_to_ingress_only_without_egress_rules():
    p = parse_policy(np("x", "p", {"podSelector": {}}))
    assert p.types == {"Ingress"}
    p = parse_policy(np("x", "p", {"podSelector": {}, "egress": [{}]}))
    assert p.types == {"Ingress", "Egress"}
    p = parse_policy(np("x", "p", {"podSelector": {}, "egress": []}))  # the API server counts rules: none → no Egress
    assert p.types == {"Ingress"}


def test_rules_of_a_direction_outside_policy_types_are_ignored():
    idx = index(np("x", "p", {"podSelector": {}, "policyTypes": ["Egress"], "ingress": [], "egress": [{}]}))
    f = flow(idx, B, A, 8080)
    assert f.allowed and not f.ingress.restricted and f.egress.restricted


def test_selected_with_no_rules_denies_all_of_that_direction():
    idx = index(np("x", "deny", {"podSelector": {"matchLabels": {"pod": "a"}}}))
    f = flow(idx, B, A, 8080)
    assert (
        not f.allowed
        and f.ingress.policies == ["x/deny"]
        and "admit no ingress at all" in f.ingress.missing.replace("admits", "admit")
    )
    assert flow(idx, A, B, 9090).allowed  # b is not selected: open


def test_flow_needs_egress_and_ingress():
    idx = index(np("x", "eg", {"podSelector": {"matchLabels": {"pod": "b"}}, "policyTypes": ["Egress"]}))
    f = flow(idx, B, A, 8080)
    assert not f.allowed and not f.egress.allowed and f.ingress.allowed


def test_policies_are_additive():
    idx = index(
        np(
            "x",
            "one",
            {
                "podSelector": {"matchLabels": {"pod": "a"}},
                "ingress": [{"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}]}],
            },
        ),
        np(
            "x",
            "two",
            {
                "podSelector": {"matchLabels": {"pod": "a"}},
                "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "y"}}}]}],
            },
        ),
    )
    assert flow(idx, B, A, 8080).ingress.admitted_by.policy == "x/one"
    assert flow(idx, C, A, 8080).ingress.admitted_by.policy == "x/two"
    assert not flow(idx, End("10.9.9.9"), A, 8080).allowed


# ---------------------------------------------------------------- peers
def test_empty_from_and_empty_rule_admit_everyone():
    idx = index(np("x", "p", {"podSelector": {}, "ingress": [{"from": []}]}))
    assert flow(idx, C, A, 1).allowed and flow(idx, End("8.8.8.8"), A, 1).allowed


def test_pod_selector_alone_is_the_policy_namespace():
    idx = index(np("x", "p", {"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]}))
    assert flow(idx, B, A, 1).allowed
    assert not flow(idx, C, A, 1).allowed  # y/c: another namespace


def test_namespace_selector_alone_is_every_pod_there():
    idx = index(
        np(
            "x",
            "p",
            {"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"env": "prod"}}}]}]},
        )
    )
    assert flow(idx, C, A, 1).allowed and not flow(idx, B, A, 1).allowed


def test_empty_namespace_selector_is_every_namespace():
    idx = index(np("x", "p", {"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {}}]}]}))
    assert flow(idx, C, A, 1).allowed and flow(idx, B, A, 1).allowed
    assert not flow(idx, End("10.0.9.9"), A, 1).allowed  # an address is no pod


def test_both_selectors_in_one_peer_are_anded():
    peer = {"namespaceSelector": {"matchLabels": {"team": "y"}}, "podSelector": {"matchLabels": {"tier": "db"}}}
    idx = index(np("x", "p", {"podSelector": {}, "ingress": [{"from": [peer]}]}))
    assert flow(idx, C, A, 1).allowed
    c2 = pod("y", "c2", {"pod": "c2"}, "10.0.2.4")
    idx.add_pod(c2)
    assert not flow(idx, c2, A, 1).allowed
    b_db = pod("x", "bdb", {"tier": "db"}, "10.0.1.9")
    assert not flow(idx, b_db, A, 1).allowed  # right labels, wrong namespace


def test_namespace_metadata_name_label_is_always_there():
    idx = PolicyIndex(
        parse_policies(
            [
                np(
                    "x",
                    "p",
                    {
                        "podSelector": {},
                        "ingress": [
                            {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "y"}}}]}
                        ],
                    },
                )
            ]
        )[0],
        [],
        [A, C],
    )
    assert flow(idx, C, A, 1).allowed


@pytest.mark.parametrize(
    "expr, labels, match",
    [
        ({"key": "tier", "operator": "In", "values": ["db", "web"]}, {"tier": "db"}, True),
        ({"key": "tier", "operator": "In", "values": ["web"]}, {"tier": "db"}, False),
        ({"key": "tier", "operator": "In", "values": ["web"]}, {}, False),
        ({"key": "tier", "operator": "NotIn", "values": ["web"]}, {"tier": "db"}, True),
        ({"key": "tier", "operator": "NotIn", "values": ["db"]}, {"tier": "db"}, False),
        ({"key": "tier", "operator": "NotIn", "values": ["db"]}, {}, True),  # absent key: NotIn matches
        ({"key": "tier", "operator": "Exists"}, {"tier": ""}, True),
        ({"key": "tier", "operator": "Exists"}, {}, False),
        ({"key": "tier", "operator": "DoesNotExist"}, {}, True),
        ({"key": "tier", "operator": "DoesNotExist"}, {"tier": "db"}, False),
    ],
)
def test_match_expressions(expr, labels, match):
    assert parse_selector({"matchExpressions": [expr]}, "s").matches(labels) is match


def test_match_labels_and_expressions_are_anded():
    sel = parse_selector(
        {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]}, "s"
    )
    assert (
        sel.matches({"app": "web", "env": "prod"})
        and not sel.matches({"app": "web"})
        and not sel.matches({"env": "prod"})
    )
    assert parse_selector({}, "s").matches({"anything": "x"})  # empty: everything


def test_ip_block_with_except_matches_pod_and_plain_addresses():
    idx = index(
        np(
            "x",
            "p",
            {
                "podSelector": {},
                "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.2.0/24"]}}]}],
            },
        )
    )
    assert flow(idx, B, A, 1).allowed  # pod IP 10.0.1.2
    assert not flow(idx, C, A, 1).allowed  # 10.0.2.3: excepted
    assert flow(idx, End("10.0.7.7"), A, 1).allowed
    assert not flow(idx, End("10.1.0.1"), A, 1).allowed
    assert not flow(idx, End("fd00::1"), A, 1).allowed  # another family


def test_host_network_pod_is_only_an_address():
    idx = index(np("x", "p", {"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]}))
    assert not flow(idx, HOST, A, 1).allowed  # podSelector {} does not pick a host-network pod
    idx = index(np("x", "p", {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "192.168.0.0/24"}}]}]}))
    assert flow(idx, HOST, A, 1).allowed
    # and a host-network pod is never isolated by a policy
    idx = index(np("x", "deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}))
    f = flow(idx, B, HOST, 1)
    assert not f.ingress.applies and f.ingress.allowed and not f.egress.allowed


# ---------------------------------------------------------------- ports
def test_ports_number_protocol_default_tcp():
    idx = index(np("x", "p", {"podSelector": {}, "ingress": [{"ports": [{"port": 8080}]}]}))
    assert flow(idx, B, A, 8080).allowed
    assert not flow(idx, B, A, 8080, "UDP").allowed
    assert not flow(idx, B, A, 8081).allowed


def test_port_protocol_only_is_every_port_of_it():
    idx = index(np("x", "p", {"podSelector": {}, "ingress": [{"ports": [{"protocol": "UDP"}]}]}))
    assert flow(idx, B, A, 5353, "UDP").allowed and not flow(idx, B, A, 5353, "TCP").allowed


def test_end_port_range():
    idx = index(np("x", "p", {"podSelector": {}, "ingress": [{"ports": [{"port": 8000, "endPort": 8100}]}]}))
    assert flow(idx, B, A, 8000).allowed and flow(idx, B, A, 8100).allowed and not flow(idx, B, A, 8101).allowed


def test_sctp():
    idx = index(np("x", "p", {"podSelector": {}, "ingress": [{"ports": [{"protocol": "SCTP", "port": 9}]}]}))
    assert flow(idx, B, A, 9, "SCTP").allowed and not flow(idx, B, A, 9, "TCP").allowed


def test_named_port_resolves_on_the_destination_pod():
    idx = index(np("x", "p", {"podSelector": {}, "ingress": [{"ports": [{"port": "http"}]}]}))
    assert flow(idx, B, A, 8080).allowed  # a's http is 8080
    assert not flow(idx, B, A, 9090).allowed
    assert flow(idx, A, B, 9090).allowed  # b's http is 9090
    assert not flow(idx, A, B, 8080).allowed
    assert flow(idx, B, A, "http").port == 8080  # asking by name


def test_named_port_in_egress_resolves_on_the_destination_and_never_matches_an_address():
    idx = index(
        np(
            "x",
            "p",
            {
                "podSelector": {"matchLabels": {"pod": "b"}},
                "policyTypes": ["Egress"],
                "egress": [{"ports": [{"port": "dns", "protocol": "UDP"}]}],
            },
        )
    )
    assert flow(idx, B, A, 53, "UDP").egress.allowed
    assert not flow(
        idx, B, End("10.0.1.1"), 53, "UDP"
    ).egress.allowed  # a's IP given as a bare address: no pod, no name
    assert not flow(idx, B, End("8.8.8.8"), 53, "UDP").egress.allowed


def test_empty_ports_is_every_port_and_protocol():
    idx = index(np("x", "p", {"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}], "ports": []}]}))
    assert flow(idx, B, A, 1, "SCTP").allowed and flow(idx, B, A, 65535, "UDP").allowed


# ---------------------------------------------------------------- explanations
def test_denial_says_what_is_missing_and_patch_admits_exactly_it():
    idx = index(
        np(
            "x",
            "front",
            {
                "podSelector": {"matchLabels": {"pod": "a"}},
                "ingress": [{"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}], "ports": [{"port": 80}]}],
            },
        )
    )
    f = flow(idx, B, A, 8080)
    assert "only on 80/TCP" in f.ingress.missing and "port rule" in f.ingress.missing
    f = flow(idx, C, A, 80)
    assert "y/c" in f.ingress.missing and "peer rule" in f.ingress.missing
    doc, notes = patch_doc("ingress", A, End(C.ip, C), 80, "TCP")
    assert not notes
    patched = PolicyIndex(
        parse_policies(
            [
                np(
                    "x",
                    "front",
                    {
                        "podSelector": {"matchLabels": {"pod": "a"}},
                        "ingress": [
                            {"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}], "ports": [{"port": 80}]}
                        ],
                    },
                ),
                doc,
            ]
        )[0],
        NS,
        [A, B, C],
    )
    assert flow(patched, C, A, 80).allowed
    assert (
        not flow(patched, C, A, 81).allowed and not flow(patched, End("10.0.2.99"), A, 80).allowed
    )  # nothing else opens
    import yaml

    assert yaml.safe_load(patch_yaml("ingress", A, End(C.ip, C), 80, "TCP")) == doc


def test_admitting_rule_is_named():
    idx = index(
        np(
            "x",
            "p",
            {
                "podSelector": {},
                "ingress": [
                    {"from": [{"podSelector": {"matchLabels": {"pod": "zzz"}}}]},
                    {"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}], "ports": [{"port": 8080}]},
                ],
            },
        )
    )
    a = flow(idx, B, A, 8080).ingress.admitted_by
    assert (a.policy, a.rule, a.peer, a.ports) == ("x/p", 1, "pods pod=b in namespace x", "8080/TCP")


# ---------------------------------------------------------------- unreadable policies
@pytest.mark.parametrize(
    "spec, words",
    [
        ({"podSelector": {"matchExpressions": [{"key": "a", "operator": "Has"}]}}, "invalid operator 'Has'"),
        (
            {"podSelector": {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}},
            "needs at least one value",
        ),
        (
            {"podSelector": {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}},
            "takes no values",
        ),
        ({"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.300/8"}}]}]}, "invalid CIDR"),
        ({"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.1"}}]}]}, "invalid CIDR"),
        (
            {
                "podSelector": {},
                "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["11.0.0.0/16"]}}]}],
            },
            "is not inside",
        ),
        ({"podSelector": {}, "ingress": [{"from": [{}]}]}, "a peer needs"),
        ({"podSelector": {}, "ingress": [{"ports": [{"protocol": "ICMP"}]}]}, "invalid protocol"),
        ({"podSelector": {}, "ingress": [{"ports": [{"port": 80, "endPort": 70}]}]}, "endPort"),
        ({"podSelector": {}, "policyTypes": ["Sideways"]}, "policyTypes"),
    ],
)
def test_unreadable_policy_is_named_and_the_rest_evaluated(spec, words):
    good = np(
        "x", "allow-b", {"podSelector": {}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}]}]}
    )
    pols, problems = parse_policies([np("x", "bad", spec), good])
    assert [p.key for p in pols] == ["x/allow-b"]
    assert len(problems) == 1 and problems[0].startswith("NetworkPolicy x/bad (item 0): ") and words in problems[0], (
        problems
    )
    assert "\n" not in problems[0]
    idx = PolicyIndex(pols, NS, [A, B, C])
    assert flow(idx, B, A, 1).allowed and not flow(idx, C, A, 1).allowed
    with pytest.raises(PolicyError):
        parse_policy(np("x", "bad", spec))


# ---------------------------------------------------------------- the CNI
@pytest.mark.parametrize(
    "names, cni, enforced",
    [
        (["calico-node", "calico-kube-controllers"], "calico", True),
        (["cilium", "cilium-operator"], "cilium", True),
        (["kube-flannel-ds"], "flannel", False),
        (["kube-flannel-ds", "calico-node"], "calico + flannel", True),
        (["canal"], "canal", True),
        (["weave-net"], "weave-net", True),
        (["antrea-agent", "antrea-controller"], "antrea", True),
        (["kube-router"], "kube-router", True),
        (["kube-proxy", "coredns"], None, None),
        ([], None, None),
    ],
)
def test_cni_recognition(names, cni, enforced):
    comps = [{"kind": "DaemonSet", "namespace": "kube-system", "name": n, "containers": []} for n in names]
    e = recognise_cni(comps)
    assert (e.cni, e.enforced) == (cni, enforced)


def test_cni_from_pods_and_aws_agent():
    pods = [{"kind": "Pod", "namespace": "kube-system", "name": "calico-node-x7k2p", "owner": None, "containers": []}]
    assert recognise_cni(pods).cni == "calico"
    aws = lambda *c: [{"kind": "DaemonSet", "name": "aws-node", "containers": list(c)}]  # noqa: E731
    assert recognise_cni(aws({"name": "aws-node"})).enforced is False
    assert (
        recognise_cni(
            aws({"name": "aws-node"}, {"name": "aws-eks-nodeagent", "args": ["--enable-network-policy=true"]})
        ).enforced
        is True
    )
    assert (
        recognise_cni(
            aws({"name": "aws-node"}, {"name": "aws-eks-nodeagent", "args": ["--enable-network-policy=false"]})
        ).enforced
        is False
    )
    assert recognise_cni(aws({"name": "aws-node"}, {"name": "aws-eks-nodeagent", "args": []})).enforced is None
    kr = [
        {
            "kind": "DaemonSet",
            "name": "kube-router",
            "containers": [{"name": "kube-router", "args": ["--run-firewall=false"]}],
        }
    ]
    assert recognise_cni(kr).enforced is False
    assert recognise_cni(None).enforced is None


def test_dual_stack_pod_uses_the_flows_ip_version():
    ds = Pod("y", "ds", {"pod": "ds"}, ("10.0.2.9", "fd00::9"))
    idx = index(np("x", "p", {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "fd00::/64"}}]}]}))
    idx.add_pod(ds)
    v6_dst = Pod("x", "a6", {"pod": "a"}, ("10.0.1.1", "fd00::1"))
    assert not flow(
        idx, End("10.0.2.9", ds), End("10.0.1.1", v6_dst), 1
    ).allowed  # an IPv4 flow: the v6 block does not count
    assert flow(idx, End("10.0.2.9", ds), End("fd00::1", v6_dst), 1).allowed  # IPv6 to the pod: the pod's v6 address


def test_traffic_from_the_pods_own_node_is_allowed():
    here = Pod("x", "a", {"pod": "a"}, ("10.0.1.1",), host_ip="192.168.0.5")
    idx = PolicyIndex(parse_policies([np("x", "deny", {"podSelector": {}})])[0], NS, [here, HOST, B])
    f = flow(idx, End("192.168.0.5"), here, 8080)
    assert f.allowed and f.ingress.restricted and f.ingress.admitted_by.policy == "(node)"
    assert flow(idx, HOST, here, 8080).allowed  # a host-network pod on that node: the node's address
    assert not flow(idx, End("192.168.0.6"), here, 8080).allowed  # another node
    assert not flow(idx, B, here, 8080).allowed  # a pod is not its node

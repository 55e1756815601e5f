"""Truth tables in the layout of the upstream network-policy e2e suite — namespaces x, y, z; pods a, b, c (labels
pod=a …, namespaces ns=x …); ports 80 and 81, TCP and UDP — for many policy shapes. Each expectation is written
out as statements about who may reach whom (not computed by kpdiag's code), and every one of the 9×9 pairs is
asked through the CLI: `kpdiag policy --bundle DIR --from NS/POD --to NS/POD --port P/PROTO -o json`."""

from __future__ import annotations

import pytest

from tests.netpol.world import NAMESPACES, PODS, ask, policy, write_bundle

ALL = [f"{n}/{p}" for n in NAMESPACES for p in PODS]


class Reach:
    """Expected reachability, built like the upstream suite's: a default, then statements."""

    def __init__(self, default: bool = True):
        self.m = {(s, d): default for s in ALL for d in ALL}

    def to(self, dst: str, ok: bool) -> "Reach":
        for s in ALL:
            self.m[(s, dst)] = ok
        return self

    def from_(self, src: str, ok: bool) -> "Reach":
        for d in ALL:
            self.m[(src, d)] = ok
        return self

    def pair(self, src: str, dst: str, ok: bool) -> "Reach":
        self.m[(src, dst)] = ok
        return self

    def to_ns(self, ns: str, ok: bool) -> "Reach":
        for p in PODS:
            self.to(f"{ns}/{p}", ok)
        return self

    def from_ns(self, ns: str, ok: bool) -> "Reach":
        for p in PODS:
            self.from_(f"{ns}/{p}", ok)
        return self


def pod_a(ingress=None, egress=None, types=None, selector=None):
    spec = {"podSelector": selector if selector is not None else {"matchLabels": {"pod": "a"}}}
    if ingress is not None:
        spec["ingress"] = ingress
    if egress is not None:
        spec["egress"] = egress
    if types:
        spec["policyTypes"] = types
    return spec


def sel(**labels):
    return {"matchLabels": labels}


def shapes():
    """(name, [policies], port, expected Reach)"""
    out = []

    def add(name, pols, port, reach):
        out.append(pytest.param(pols, port, reach, id=name))

    add("deny-all-ingress-in-x", [policy("x", "deny", {"podSelector": {}})], "80/TCP", Reach().to_ns("x", False))
    add("allow-all-ingress-in-x", [policy("x", "allow", {"podSelector": {}, "ingress": [{}]})], "81/UDP", Reach())
    add(
        "a-from-pod-b-same-namespace",
        [policy("x", "p", pod_a([{"from": [{"podSelector": sel(pod="b")}]}]))],
        "80/TCP",
        Reach().to("x/a", False).pair("x/b", "x/a", True),
    )
    add(
        "a-from-namespace-y",
        [policy("x", "p", pod_a([{"from": [{"namespaceSelector": sel(ns="y")}]}]))],
        "80/TCP",
        Reach().to("x/a", False).pair("y/a", "x/a", True).pair("y/b", "x/a", True).pair("y/c", "x/a", True),
    )
    add(
        "a-from-namespace-y-and-pod-c",
        [policy("x", "p", pod_a([{"from": [{"namespaceSelector": sel(ns="y"), "podSelector": sel(pod="c")}]}]))],
        "80/TCP",
        Reach().to("x/a", False).pair("y/c", "x/a", True),
    )
    add(
        "a-from-namespace-y-or-pod-c",
        [policy("x", "p", pod_a([{"from": [{"namespaceSelector": sel(ns="y")}, {"podSelector": sel(pod="c")}]}]))],
        "80/TCP",
        Reach()
        .to("x/a", False)
        .pair("y/a", "x/a", True)
        .pair("y/b", "x/a", True)
        .pair("y/c", "x/a", True)
        .pair("x/c", "x/a", True),
    )
    add(
        "a-from-namespaces-not-in-x",
        [
            policy(
                "x",
                "p",
                pod_a(
                    [
                        {
                            "from": [
                                {
                                    "namespaceSelector": {
                                        "matchExpressions": [{"key": "ns", "operator": "NotIn", "values": ["x"]}]
                                    }
                                }
                            ]
                        }
                    ]
                ),
            )
        ],
        "80/TCP",
        Reach()
        .to("x/a", False)
        .pair("y/a", "x/a", True)
        .pair("y/b", "x/a", True)
        .pair("y/c", "x/a", True)
        .pair("z/a", "x/a", True)
        .pair("z/b", "x/a", True)
        .pair("z/c", "x/a", True),
    )
    add(
        "a-from-pods-in-b-c-any-namespace",
        [
            policy(
                "x",
                "p",
                pod_a(
                    [
                        {
                            "from": [
                                {
                                    "namespaceSelector": {},
                                    "podSelector": {
                                        "matchExpressions": [{"key": "pod", "operator": "In", "values": ["b", "c"]}]
                                    },
                                }
                            ]
                        }
                    ]
                ),
            )
        ],
        "80/TCP",
        Reach()
        .to("x/a", False)
        .pair("x/b", "x/a", True)
        .pair("x/c", "x/a", True)
        .pair("y/b", "x/a", True)
        .pair("y/c", "x/a", True)
        .pair("z/b", "x/a", True)
        .pair("z/c", "x/a", True),
    )
    add(
        "a-from-namespaces-without-ns-label",
        [
            policy(
                "x",
                "p",
                pod_a(
                    [
                        {
                            "from": [
                                {"namespaceSelector": {"matchExpressions": [{"key": "ns", "operator": "DoesNotExist"}]}}
                            ]
                        }
                    ]
                ),
            )
        ],
        "80/TCP",
        Reach().to("x/a", False),
    )
    add(
        "a-from-pods-with-pod-label-here",
        [
            policy(
                "x",
                "p",
                pod_a([{"from": [{"podSelector": {"matchExpressions": [{"key": "pod", "operator": "Exists"}]}}]}]),
            )
        ],
        "80/TCP",
        Reach().to("x/a", False).pair("x/a", "x/a", True).pair("x/b", "x/a", True).pair("x/c", "x/a", True),
    )
    add(
        "a-port-81-only-on-80",
        [policy("x", "p", pod_a([{"ports": [{"port": 81}]}]))],
        "80/TCP",
        Reach().to("x/a", False),
    )
    add("a-port-81-only-on-81", [policy("x", "p", pod_a([{"ports": [{"port": 81}]}]))], "81/TCP", Reach())
    add("a-named-port-80-on-80", [policy("x", "p", pod_a([{"ports": [{"port": "serve-80-tcp"}]}]))], "80/TCP", Reach())
    add(
        "a-named-port-80-on-81",
        [policy("x", "p", pod_a([{"ports": [{"port": "serve-80-tcp"}]}]))],
        "81/TCP",
        Reach().to("x/a", False),
    )
    add(
        "a-udp-80-only-tcp-asked",
        [policy("x", "p", pod_a([{"ports": [{"protocol": "UDP", "port": 80}]}]))],
        "80/TCP",
        Reach().to("x/a", False),
    )
    add(
        "a-udp-80-only-udp-asked",
        [policy("x", "p", pod_a([{"ports": [{"protocol": "UDP", "port": 80}]}]))],
        "80/UDP",
        Reach(),
    )
    add("a-sctp-only", [policy("x", "p", pod_a([{"ports": [{"protocol": "SCTP"}]}]))], "80/SCTP", Reach())
    add(
        "a-sctp-only-tcp-asked",
        [policy("x", "p", pod_a([{"ports": [{"protocol": "SCTP"}]}]))],
        "81/TCP",
        Reach().to("x/a", False),
    )
    add("a-end-port-80-81", [policy("x", "p", pod_a([{"ports": [{"port": 79, "endPort": 81}]}]))], "81/TCP", Reach())
    add(
        "a-end-port-70-79",
        [policy("x", "p", pod_a([{"ports": [{"port": 70, "endPort": 79}]}]))],
        "80/TCP",
        Reach().to("x/a", False),
    )
    add(
        "a-from-ipblock-y-except-y-b",
        [policy("x", "p", pod_a([{"from": [{"ipBlock": {"cidr": "10.244.2.0/24", "except": ["10.244.2.11/32"]}}]}]))],
        "80/TCP",
        Reach().to("x/a", False).pair("y/a", "x/a", True).pair("y/c", "x/a", True),
    )
    add(
        "deny-all-egress-in-x",
        [policy("x", "deny", {"podSelector": {}, "policyTypes": ["Egress"]})],
        "80/TCP",
        Reach().from_ns("x", False),
    )
    add(
        "a-egress-to-namespace-y-port-80",
        [
            policy(
                "x",
                "p",
                pod_a(egress=[{"to": [{"namespaceSelector": sel(ns="y")}], "ports": [{"port": 80}]}], types=["Egress"]),
            )
        ],
        "80/TCP",
        Reach().from_("x/a", False).pair("x/a", "y/a", True).pair("x/a", "y/b", True).pair("x/a", "y/c", True),
    )
    add(
        "a-egress-to-namespace-y-asked-81",
        [
            policy(
                "x",
                "p",
                pod_a(egress=[{"to": [{"namespaceSelector": sel(ns="y")}], "ports": [{"port": 80}]}], types=["Egress"]),
            )
        ],
        "81/TCP",
        Reach().from_("x/a", False),
    )
    add(
        "a-egress-to-pod-b-everywhere",
        [
            policy(
                "x",
                "p",
                pod_a(egress=[{"to": [{"namespaceSelector": {}, "podSelector": sel(pod="b")}]}], types=["Egress"]),
            )
        ],
        "80/UDP",
        Reach().from_("x/a", False).pair("x/a", "x/b", True).pair("x/a", "y/b", True).pair("x/a", "z/b", True),
    )
    add(
        "deny-ingress-x-and-egress-y",
        [
            policy("x", "deny-in", {"podSelector": {}}),
            policy("y", "deny-out", {"podSelector": {}, "policyTypes": ["Egress"]}),
        ],
        "80/TCP",
        Reach().to_ns("x", False).from_ns("y", False),
    )
    add(
        "additive-two-policies-on-a",
        [
            policy("x", "one", pod_a([{"from": [{"podSelector": sel(pod="b")}]}])),
            policy("x", "two", pod_a([{"from": [{"namespaceSelector": sel(ns="z"), "podSelector": sel(pod="c")}]}])),
        ],
        "80/TCP",
        Reach().to("x/a", False).pair("x/b", "x/a", True).pair("z/c", "x/a", True),
    )
    add(
        "egress-only-type-ignores-ingress-rules",
        [policy("x", "p", pod_a(ingress=[], egress=[{}], types=["Egress"]))],
        "80/TCP",
        Reach(),
    )
    add(
        "no-types-with-egress-rules-restricts-egress",
        [policy("x", "p", pod_a(ingress=[{}], egress=[{"to": [{"podSelector": {}}]}]))],
        "80/TCP",
        Reach().from_("x/a", False).pair("x/a", "x/a", True).pair("x/a", "x/b", True).pair("x/a", "x/c", True),
    )
    add(
        "no-types-empty-egress-list-is-ingress-only",
        [policy("x", "p", pod_a(egress=[]))],
        "80/TCP",
        Reach().to("x/a", False),
    )
    add(
        "a-egress-named-port-81",
        [policy("x", "p", pod_a(egress=[{"ports": [{"port": "serve-81-udp", "protocol": "UDP"}]}], types=["Egress"]))],
        "81/UDP",
        Reach(),
    )
    add(
        "a-egress-named-port-81-asked-80",
        [policy("x", "p", pod_a(egress=[{"ports": [{"port": "serve-81-udp", "protocol": "UDP"}]}], types=["Egress"]))],
        "80/UDP",
        Reach().from_("x/a", False),
    )
    add(
        "ingress-and-egress-in-one-policy",
        [
            policy(
                "x",
                "p",
                pod_a(
                    ingress=[{"from": [{"namespaceSelector": sel(ns="z")}]}],
                    egress=[{"to": [{"namespaceSelector": sel(ns="z")}]}],
                    types=["Ingress", "Egress"],
                ),
            )
        ],
        "80/TCP",
        Reach()
        .to("x/a", False)
        .from_("x/a", False)
        .pair("z/a", "x/a", True)
        .pair("z/b", "x/a", True)
        .pair("z/c", "x/a", True)
        .pair("x/a", "z/a", True)
        .pair("x/a", "z/b", True)
        .pair("x/a", "z/c", True),
    )
    return out


SHAPES = shapes()


def test_at_least_twenty_shapes():
    assert len(SHAPES) >= 20


@pytest.mark.parametrize("policies, port, reach", SHAPES)
def test_truth_table(tmp_path, policies, port, reach):
    bundle = write_bundle(tmp_path, policies)
    wrong = []
    for src in ALL:
        for dst in ALL:
            doc = ask(bundle, src, dst, port)
            if doc["allowed"] != reach.m[(src, dst)]:
                wrong.append(
                    f"{src}→{dst}: kpdiag says {'allowed' if doc['allowed'] else 'denied'} "
                    f"({doc['egress']['missing'] or ''} {doc['ingress']['missing'] or ''})"
                )
    assert not wrong, "\n".join(wrong)

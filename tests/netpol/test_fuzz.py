"""Whatever a NetworkPolicy, pod or namespace object holds, reading it never raises: an unreadable policy is one
named problem (hypothesis-generated objects, shaped like the real ones with junk in any place)."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from kpdiag.state.netpol import End, Pod, component, parse_policies, recognise_cni
from kpdiag.state.netpol_eval import PolicyIndex

junk = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 70000)
    | st.floats(allow_nan=False)
    | st.text(max_size=12)
    | st.sampled_from(
        [
            "In",
            "NotIn",
            "Exists",
            "DoesNotExist",
            "TCP",
            "UDP",
            "SCTP",
            "10.0.0.0/8",
            "fd00::/64",
            "Ingress",
            "Egress",
            "http",
            "pod",
            "a",
        ]
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)


def maybe(strategy):
    return st.one_of(junk, strategy)


selector = st.fixed_dictionaries(
    {},
    optional={
        "matchLabels": maybe(
            st.dictionaries(st.sampled_from(["pod", "ns", "app"]), st.sampled_from(["a", "b", "x"]), max_size=2)
        ),
        "matchExpressions": maybe(
            st.lists(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "key": maybe(st.sampled_from(["pod", "ns"])),
                        "operator": junk,
                        "values": maybe(st.lists(st.sampled_from(["a", "b"]), max_size=2)),
                    },
                ),
                max_size=2,
            )
        ),
    },
)
peer = st.fixed_dictionaries(
    {},
    optional={
        "podSelector": maybe(selector),
        "namespaceSelector": maybe(selector),
        "ipBlock": maybe(
            st.fixed_dictionaries({}, optional={"cidr": junk, "except": maybe(st.lists(junk, max_size=2))})
        ),
    },
)
port = st.fixed_dictionaries({}, optional={"protocol": junk, "port": junk, "endPort": junk})
rule = st.fixed_dictionaries(
    {},
    optional={
        "from": maybe(st.lists(maybe(peer), max_size=2)),
        "to": maybe(st.lists(maybe(peer), max_size=2)),
        "ports": maybe(st.lists(maybe(port), max_size=2)),
    },
)
policy = st.fixed_dictionaries(
    {
        "metadata": maybe(st.fixed_dictionaries({"name": junk, "namespace": junk})),
        "spec": maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "podSelector": maybe(selector),
                    "policyTypes": junk,
                    "ingress": maybe(st.lists(maybe(rule), max_size=2)),
                    "egress": maybe(st.lists(maybe(rule), max_size=2)),
                },
            )
        ),
    }
)


@settings(max_examples=400, deadline=None)
@given(st.lists(maybe(policy), max_size=4))
@example([{"metadata": {"name": None, "namespace": "\n"}, "spec": {}}])  # a newline in a name: shown, not obeyed
def test_any_policy_is_read_or_named(items):
    pols, problems = parse_policies(items)
    assert len(pols) + len(problems) == len(items)
    assert all("\n" not in p and p.startswith("NetworkPolicy ") for p in problems)
    a = Pod("x", "a", {"pod": "a"}, ("10.0.0.1",), ports=(("http", 80, "TCP"),))
    b = Pod("y", "b", {"pod": "b"}, ("10.0.0.2",))
    idx = PolicyIndex(pols, [{"metadata": {"name": "y", "labels": {"ns": "y"}}}], [a, b])
    for proto in ("TCP", "UDP"):
        f = idx.evaluate(End(b.ip, b), End(a.ip, a), 80, proto)
        assert isinstance(f.allowed, bool)
        if not f.allowed:
            assert (f.ingress.missing or f.egress.missing) and (f.ingress.patch or f.egress.patch)


@settings(max_examples=300, deadline=None)
@given(
    maybe(
        st.fixed_dictionaries(
            {
                "metadata": maybe(
                    st.fixed_dictionaries({}, optional={"name": junk, "namespace": junk, "labels": junk})
                ),
                "spec": maybe(st.fixed_dictionaries({}, optional={"containers": junk, "hostNetwork": junk})),
                "status": maybe(st.fixed_dictionaries({}, optional={"podIP": junk, "podIPs": junk})),
            }
        )
    )
)
def test_any_pod_or_component_is_read(obj):
    if isinstance(obj, dict):
        try:
            Pod.from_api(obj)
        except (TypeError, AttributeError) as exc:  # a reader must not crash on a malformed object
            raise AssertionError(f"Pod.from_api raised {exc!r} on {obj!r}") from exc
    recognise_cni([component(obj)] if component(obj) else [])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "kind": junk,
                    "namespace": junk,
                    "name": maybe(st.sampled_from(["calico-node", "aws-node", "kube-flannel-ds", "cilium-x1"])),
                    "owner": junk,
                    "containers": maybe(
                        st.lists(
                            maybe(
                                st.fixed_dictionaries(
                                    {}, optional={"name": maybe(st.just("aws-eks-nodeagent")), "args": junk}
                                )
                            ),
                            max_size=2,
                        )
                    ),
                },
            )
        ),
        max_size=4,
    )
)
def test_any_cni_file_is_read(items):
    e = recognise_cni(items)  # cluster/cni.json items are read as they are
    assert e.enforced in (True, False, None)

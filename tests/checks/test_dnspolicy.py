"""KP142: a hostNetwork pod with dnsPolicy ClusterFirst gets the node's resolv.conf (the API's pod objects show it).
The lab side: fixtures/dns-hostnetwork-clusterfirst and dns-hostnetwork-withhostnet (tests/dns/dnslab.py, the probe run
in the node's network namespace)."""

from __future__ import annotations

from tests.given import given


def _pod(name="agent-abc", host=True, policy=None, env=None, owner=("DaemonSet", "agent"), ns="monitoring"):
    spec = {"hostNetwork": host, "containers": [{"name": "c", "image": "i", "env": env or []}]}
    if policy:
        spec["dnsPolicy"] = policy
    meta = {"namespace": ns, "name": name}
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1]}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


SCRAPE = [{"name": "TARGET", "value": "http://web.shop.svc.cluster.local:8080"}]


def test_a_hostnetwork_pod_naming_cluster_names_fires_with_its_daemonset_patch():
    (f,) = given(pods=[_pod(env=SCRAPE)]).fires("KP142")
    assert f.summary.startswith(
        "monitoring/agent-abc runs with hostNetwork: true and dnsPolicy ClusterFirst (the default)"
    )
    assert "web.shop.svc.cluster.local" in f.summary and f.data["cluster_names"] == ["web.shop.svc.cluster.local"]
    assert f.fix[0] == (
        "kubectl -n monitoring patch daemonset agent --type merge "
        """-p '{"spec":{"template":{"spec":{"dnsPolicy":"ClusterFirstWithHostNet"}}}}'"""
    )
    (f,) = given(pods=[_pod(env=SCRAPE, policy="ClusterFirst", owner=("ReplicaSet", "agent-7d9f"))]).fires("KP142")
    assert "Deployment that owns ReplicaSet monitoring/agent-7d9f" in f.fix[0]


def test_the_pod_kpdiag_asked_from_fires_without_names():
    pods = [_pod(name="debug-x", owner=None)]
    (f,) = given(pods=pods, manifest={"client": {"namespace": "monitoring", "pod": "debug-x"}}).fires("KP142")
    assert "it is the pod kpdiag asked from" in f.summary and f.data["client"] is True
    given(pods=pods).silent("KP142")  # not asked from, names nothing: kube-proxy and CNI agents look like this


def test_silent_when_the_policy_fits_or_the_pod_is_not_hostnetwork():
    given(pods=[_pod(env=SCRAPE, policy="ClusterFirstWithHostNet")]).silent("KP142")
    given(pods=[_pod(env=SCRAPE, policy="Default")]).silent("KP142")  # chose the node's resolver on purpose
    given(pods=[_pod(env=SCRAPE, host=False)]).silent("KP142")


def test_without_pods_it_skips():
    assert given(drop=("cluster/pods.json",)).skips("KP142")

"""Write the fixtures/netpol-* bundles (python3 -m tests.netpol.make_fixtures): a Service shop/web (app=web, two
pods, targetPort 8080), a client pod debug/client (app=debug), CoreDNS pods in kube-system, and the policies and
CNI of each scenario. API objects in the API's own JSON shape, Lists as kubectl prints them."""

from __future__ import annotations

import json
import os
import shutil

from tests import k8sobjects as k8s
from tests.conftest import FIXTURES


def ns(name, **labels):
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **labels}},
    }


def netpol(namespace, name, spec):
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def dns_pod(name, ip):
    p = k8s.pod(
        "kube-system",
        name,
        ip,
        {"k8s-app": "kube-dns", "pod-template-hash": "5d78c9869d"},
        ports=[
            {"name": "dns", "containerPort": 53, "protocol": "UDP"},
            {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
            {"name": "metrics", "containerPort": 9153, "protocol": "TCP"},
        ],
    )
    p["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "coredns-5d78c9869d"}]
    return p


def cni(*names):
    items = [
        {
            "kind": "DaemonSet",
            "namespace": "kube-system",
            "name": n,
            "owner": None,
            "containers": [{"name": n.split("-")[0], "image": f"example/{n}:v1", "args": []}],
        }
        for n in names
    ]
    return {"apiVersion": "kpdiag/v1", "kind": "CNIComponents", "namespaces": ["kube-system"], "items": items}


DNS_SVC = k8s.service(
    "kube-system",
    "kube-dns",
    "10.96.0.10",
    [k8s.port(53, 53, "dns", "UDP"), k8s.port(53, 53, "dns-tcp", "TCP")],
    {"k8s-app": "kube-dns"},
)

ALLOW_DNS = {
    "to": [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ],
    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
}
WEB_ALLOW_FRONTEND = netpol(
    "shop",
    "web-allow-frontend",
    {
        "podSelector": {"matchLabels": {"app": "web"}},
        "policyTypes": ["Ingress"],
        "ingress": [
            {
                "from": [{"podSelector": {"matchLabels": {"app": "frontend"}}}],
                "ports": [{"protocol": "TCP", "port": 8080}],
            }
        ],
    },
)

SCENARIOS = {
    "netpol-ingress-denied": {
        "about": "shop/web-allow-frontend admits only app=frontend (in shop) on 8080 to the web pods; the client debug/client is "
        "not admitted (calico enforces).",
        "policies": [WEB_ALLOW_FRONTEND],
        "cni": cni("calico-node", "calico-kube-controllers"),
        "fires": ["KP120"],
    },
    "netpol-unknown-cni": {
        "about": "the same denial, with no CNI information: KP120 still fires and says the CNI was not recognised.",
        "policies": [WEB_ALLOW_FRONTEND],
        "cni": None,
        "fires": ["KP120"],
    },
    "netpol-egress-denied": {
        "about": "debug/default-deny-egress selects every pod of debug and admits DNS only: the client may not reach the web pods.",
        "policies": [
            netpol(
                "debug", "default-deny-egress", {"podSelector": {}, "policyTypes": ["Egress"], "egress": [ALLOW_DNS]}
            )
        ],
        "cni": cni("cilium", "cilium-operator"),
        "fires": ["KP121"],
    },
    "netpol-dns-blocked": {
        "about": "debug/client-egress lets the client reach the web pods on 8080 and nothing else: DNS (53/UDP, 53/TCP) is dropped.",
        "policies": [
            netpol(
                "debug",
                "client-egress",
                {
                    "podSelector": {"matchLabels": {"app": "debug"}},
                    "policyTypes": ["Egress"],
                    "egress": [
                        {
                            "to": [
                                {
                                    "namespaceSelector": {"matchLabels": {"team": "shop"}},
                                    "podSelector": {"matchLabels": {"app": "web"}},
                                }
                            ],
                            "ports": [{"port": 8080}],
                        }
                    ],
                },
            )
        ],
        "cni": cni("calico-node"),
        "fires": ["KP122"],
    },
    "netpol-not-enforced": {
        "about": "the web-allow-frontend denial on plain flannel: present but not enforced (KP123), never blamed (no KP120).",
        "policies": [WEB_ALLOW_FRONTEND],
        "cni": cni("kube-flannel-ds"),
        "fires": ["KP123"],
    },
    "netpol-allowed": {
        "about": "policies admit the client (namespaceSelector team=debug + podSelector app=debug) to the web pods by the named "
        "port http, and DNS; one more policy has an invalid operator: one 'could not read' line, the rest evaluated.",
        "policies": [
            netpol(
                "shop",
                "web-allow-debug",
                {
                    "podSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]}]},
                    "ingress": [
                        {
                            "from": [
                                {
                                    "namespaceSelector": {"matchLabels": {"team": "debug"}},
                                    "podSelector": {"matchLabels": {"app": "debug"}},
                                }
                            ],
                            "ports": [{"port": "http"}],
                        }
                    ],
                },
            ),
            netpol(
                "debug",
                "client-egress",
                {
                    "podSelector": {"matchLabels": {"app": "debug"}},
                    "policyTypes": ["Egress"],
                    "egress": [
                        ALLOW_DNS,
                        {"to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "web"}}}]},
                    ],
                },
            ),
            netpol(
                "shop",
                "broken",
                {"podSelector": {"matchExpressions": [{"key": "app", "operator": "Equals", "values": ["x"]}]}},
            ),
        ],
        "cni": cni("antrea-agent"),
        "fires": [],
    },
}


def as_list(items):
    return json.dumps({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}, indent=1) + "\n"


def write(name: str, sc: dict) -> None:
    out = os.path.join(FIXTURES, name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "cluster"))
    web_ports = [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    pods = [
        k8s.pod(
            "shop",
            "web-7f9c4-abcde",
            "10.244.1.11",
            {"app": "web", "pod-template-hash": "7f9c4"},
            "lab-node",
            web_ports,
        ),
        k8s.pod(
            "shop",
            "web-7f9c4-fghij",
            "10.244.2.12",
            {"app": "web", "pod-template-hash": "7f9c4"},
            "lab-node",
            web_ports,
        ),
        k8s.pod("debug", "client", "10.244.1.50", {"app": "debug"}, "lab-node"),
        dns_pod("coredns-5d78c9869d-q2x7k", "10.244.0.2"),
        dns_pod("coredns-5d78c9869d-w8v3m", "10.244.0.3"),
    ]
    svc = k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, "http", "http")], {"app": "web"})
    slices = [
        k8s.endpointslice(
            "shop",
            "web",
            [
                ("10.244.1.11", True, "lab-node", "web-7f9c4-abcde"),
                ("10.244.2.12", True, "lab-node", "web-7f9c4-fghij"),
            ],
            [("http", 8080, "TCP")],
        )
    ]
    files = {
        "cluster/services.json": as_list([svc]),
        "cluster/endpointslices.json": as_list(slices),
        "cluster/pods.json": as_list(pods[:2]),
        "cluster/client-pod.json": as_list(pods[2:3]),
        "cluster/dns-service.json": as_list([DNS_SVC]),
        "cluster/dns-pods.json": as_list(pods[3:]),
        "cluster/dns-endpointslices.json": as_list(
            [
                k8s.endpointslice(
                    "kube-system",
                    "kube-dns",
                    [(p["status"]["podIP"], True, "lab-node", p["metadata"]["name"]) for p in pods[3:]],
                    [("dns", 53, "UDP"), ("dns-tcp", 53, "TCP")],
                )
            ]
        ),
        "cluster/namespaces.json": as_list([ns("shop", team="shop"), ns("debug", team="debug"), ns("kube-system")]),
        "cluster/networkpolicies.json": json.dumps(
            {
                "apiVersion": "v1",
                "kind": "List",
                "metadata": {"namespaces": ["debug", "kube-system", "shop"]},
                "items": sc["policies"],
            },
            indent=1,
        )
        + "\n",
        "kpdiag.json": json.dumps(
            {
                "format": "kpdiag-bundle/1",
                "kpdiag_version": "fixture",
                "created": "2026-12-03T09:00:00Z",
                "node": "lab-node",
                "service": "shop/web",
                "client": {"namespace": "debug", "pod": "client"},
                "errors": [],
            },
            indent=1,
            sort_keys=True,
        )
        + "\n",
        "scenario.json": json.dumps(
            {
                "about": sc["about"],
                "recorded": "written by tests/netpol/make_fixtures.py (API objects in the API's JSON shape)",
                "expect": {"fires": sc["fires"], "may_skip": []},
            },
            indent=1,
        )
        + "\n",
    }
    if sc["cni"] is not None:
        files["cluster/cni.json"] = json.dumps(sc["cni"], indent=1) + "\n"
    for rel, text in files.items():
        with open(os.path.join(out, rel), "w") as fh:
            fh.write(text)


if __name__ == "__main__":
    for n, s in SCENARIOS.items():
        write(n, s)
        print("wrote", n)

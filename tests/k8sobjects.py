"""Kubernetes API objects for tests, in the API's own JSON shape."""

from __future__ import annotations


def service(ns, name, cluster_ip, ports, selector=None, type_="ClusterIP", **spec):
    s = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}"},
        "spec": {"type": type_, "clusterIP": cluster_ip, "clusterIPs": [cluster_ip], "ports": ports, **spec},
    }
    if selector is not None:
        s["spec"]["selector"] = selector
    return s


def port(number, target=None, name="", protocol="TCP", node_port=None):
    p = {"name": name, "port": number, "targetPort": target if target is not None else number, "protocol": protocol}
    if node_port:
        p["nodePort"] = node_port
    return p


def endpointslice(ns, svc, endpoints, ports, name=None):
    """endpoints: [(ip, ready, node, pod)]; ports: [(name, port, protocol)]."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name or f"{svc}-abc12", "namespace": ns, "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "endpoints": [
            {
                "addresses": [ip],
                "conditions": {"ready": ready, "serving": ready, "terminating": False},
                "nodeName": node,
                "targetRef": {"kind": "Pod", "name": pod, "namespace": ns},
            }
            for ip, ready, node, pod in endpoints
        ],
        "ports": [{"name": n, "port": p, "protocol": proto} for n, p, proto in ports],
    }


def pod(ns, name, ip, labels, node="node-a", ports=(), ready=True):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "app", "image": "app:1", "ports": [dict(p) for p in ports]}],
        },
        "status": {
            "podIP": ip,
            "phase": "Running",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    **(
                        {} if ready else {"reason": "ContainersNotReady", "message": "readiness probe failed: HTTP 503"}
                    ),
                }
            ],
        },
    }


def node(name, ip="192.168.50.1", labels=None, ready=None):
    obj = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "status": {"addresses": [{"type": "InternalIP", "address": ip}]},
    }
    if ready is not None:
        obj["status"]["conditions"] = [
            {
                "type": "Ready",
                "status": "True" if ready else "Unknown",
                "reason": "KubeletReady" if ready else "NodeStatusUnknown",
                "message": "kubelet is posting ready status" if ready else "Kubelet stopped posting node status.",
            }
        ]
    return obj


def kube_proxy_configmap(mode="iptables", cluster_cidr="10.244.0.0/16"):
    conf = f'apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nclusterCIDR: {cluster_cidr}\nmode: "{mode}"\n'
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kube-proxy", "namespace": "kube-system"},
        "data": {"config.conf": conf},
    }

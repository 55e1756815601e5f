"""KP312's claim on the kernel: a node's own address given to a Service as an externalIP is, in IPVS mode, a member of
kube-proxy's KUBE-IPVS-IPS set, and KUBE-IPVS-FILTER then rejects new connections to every other port of it — the
kubelet's 10250 on the node's address is refused from outside, where it answered before. This kernel has no IPVS, so
the virtual servers are written (tests.synth.ipvs_files, as the IPVS fixtures are); the ipsets, kube-proxy's iptables
rules and kube-ipvs0's addresses are loaded in the lab node and recorded by kpdiag's collector. kpdiag names KP312 as
the first error."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fixtures.make_fixtures import CONFIG, IPVS_MODULES, Scenario, kube_proxy_files
from kpdiag.commands.pipeline import analyze_bundle
from tests import k8sobjects as k8s
from tests.synth import Endpoint, Port, Service, ipvs_files

from .bundle_from_ns import bundle_from_ns
from .netlab import KubeNodeLab
from .test_lb_capture_oracle import SERVE, _ask

pytestmark = pytest.mark.lab

NODE_IP = "192.168.50.1"


def _listing(items) -> str:
    import json

    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=1) + "\n"


def test_the_nodes_address_as_an_external_ip_closes_its_other_ports(lab, tmp_path):
    k = KubeNodeLab.build(lab, pod_count=2)
    lab.route("node", "default", "via", k.client_ip)
    lab.background("node", [sys.executable, "-c", SERVE, "0.0.0.0", "10250", "kubelet"], subprocess.DEVNULL)
    lab.sh("node", [sys.executable, "-c", "import time; time.sleep(0.5)"])
    before = _ask(lab, "client", NODE_IP, 10250)
    pod = k.pods["pod1"]
    svc = Service("shop", "web", "10.96.0.20", [Port("http", 80, 8080)], [Endpoint(pod)], external_ips=[NODE_IP])
    files = ipvs_files([svc], node_ip=NODE_IP)
    # kube-ipvs0 (a dummy on a real node; this kernel has none: a veth) with the Service's addresses
    lab.sh("node", ["ip", "link", "add", "kube-ipvs0", "type", "veth", "peer", "name", "kube-ipvs0p"])
    for ip in ("10.96.0.20", NODE_IP):
        lab.sh("node", ["ip", "addr", "add", f"{ip}/32", "dev", "kube-ipvs0"])
    lab.sh("node", ["ipset", "restore"], input=files["node/ipset.txt"])
    k.load_iptables(files["node/iptables-save.txt"])
    after = _ask(lab, "client", NODE_IP, 10250)
    assert before == "kubelet" and after.startswith("failed ConnectionRefused"), (before, after)

    api = {
        "cluster/services.json": _listing(
            [
                k8s.service(
                    "shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"}, externalIPs=[NODE_IP]
                )
            ]
        ),
        "cluster/endpointslices.json": _listing(
            [k8s.endpointslice("shop", "web", [(pod, True, "lab-node", "web-0")], [("http", 8080, "TCP")])]
        ),
        "cluster/nodes.json": _listing([k8s.node("lab-node", NODE_IP)]),
    }
    config = CONFIG.format(cluster_cidr="10.244.0.0/16", scheduler="rr", mode="ipvs")
    kp = kube_proxy_files(Scenario("", [], proxy="ipvs", files={"node/kube-proxy/config.yaml": config}))
    kp["node/modules.txt"] = IPVS_MODULES
    written = {rel: files[rel] for rel in ("node/ipvsadm.txt", "node/ipvsadm-list.txt", "node/ipset.txt")}
    report = analyze_bundle(bundle_from_ns(lab, "node", str(tmp_path / "b"), extra=kp | written | api))
    errors = [f for f in report.findings if f.severity == "error"]
    assert errors and errors[0].id == "KP312", [(f.id, f.summary[:80]) for f in report.findings]
    assert errors[0].data["address"] == NODE_IP and "KUBE-IPVS-FILTER" in errors[0].summary

"""A cluster DNS in the lab, and the DNS scenarios recorded from it (fixtures/dns-*) and tested live (test_dns_lab.py).

    pod0 10.244.1.10 (the client: its resolv.conf, kpdiag's DNS probe; the node itself for a hostNetwork client)
      └─ node: kube-proxy's iptables rules for kube-system/kube-dns 10.96.0.10 53/UDP+TCP → pod1:53
           └─ pod1 10.244.1.11: tests.lab.dnsserver (UDP and TCP; modes), iptables in pod1 to drop what a scenario drops

The API side (kube-dns Service, EndpointSlices, CoreDNS pods and logs) is served by tests.apiserver and read with
ClusterCollector.dns_objects(), the real client against a real HTTP server.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field

from tests.synth import Endpoint, Port, Service, iptables_ruleset
from tests.dns import objects as o

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DNS_IP = "10.96.0.10"
CLIENT, SERVER = "10.244.1.10", "10.244.1.11"
RECORDS = {
    "web.shop.svc.cluster.local": "10.96.0.20",
    "kubernetes.default.svc.cluster.local": "10.96.0.1",
    "web.debug.svc.cluster.local": "10.96.7.7",
}


def resolv(
    namespace: str = "shop", nameserver: str = DNS_IP, ndots: int = 5, extra_search: tuple = (), lines: str = ""
) -> str:
    search = " ".join([f"{namespace}.svc.cluster.local", "svc.cluster.local", "cluster.local", *extra_search])
    return f"{lines}nameserver {nameserver}\nsearch {search}\noptions ndots:{ndots}\n"


def healthy_api() -> tuple[list, dict]:
    return (
        [o.kube_dns_service(), o.kube_dns_slice([(SERVER, True, "coredns-a")]), o.coredns_pod("coredns-a", SERVER)],
        {
            "kube-system/coredns-a": ".:53\nCoreDNS-1.11.1\nlinux/amd64, go1.21.1\n[INFO] plugin/reload: Running configuration SHA512 = 1b226df\n"
        },
    )


@dataclass
class Scenario:
    about: str
    fires: list[str]
    resolv: str = field(default_factory=resolv)
    server_flags: tuple = ()
    records: dict = field(default_factory=lambda: dict(RECORDS))
    drop: tuple = ()  # protocols pod1 drops on port 53 (iptables in pod1)
    kube_dns_endpoints: bool = True  # kube-proxy's rules DNAT 10.96.0.10 to pod1 (else: REJECT, no endpoints)
    api: tuple = field(default_factory=healthy_api)
    may_skip: list = field(default_factory=list)
    # the client pod as the API shows it (cluster/pods.json, kpdiag.json 'client'); hostNetwork: the probe runs in the
    # node's namespace, with ``resolv`` as the node's own resolv.conf
    client_pod: dict | None = None

    @property
    def role(self) -> str:
        return "node" if (self.client_pod or {}).get("spec", {}).get("hostNetwork") else "pod0"


def _node_agent(dns_policy: str | None) -> dict:
    """monitoring/node-agent-x7k2p: a hostNetwork DaemonSet pod on lab-node that scrapes shop/web by its cluster name."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "namespace": "monitoring",
            "name": "node-agent-x7k2p",
            "labels": {"app": "node-agent"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "node-agent", "controller": True}
            ],
        },
        "spec": {
            "nodeName": "lab-node",
            "hostNetwork": True,
            "containers": [
                {
                    "name": "agent",
                    "image": "registry.example/node-agent:2.4",
                    "env": [{"name": "SCRAPE_TARGET", "value": "http://web.shop.svc.cluster.local:80/metrics"}],
                }
            ],
        },
        "status": {"phase": "Running", "podIP": "192.168.50.1", "hostIP": "192.168.50.1"},
    }
    if dns_policy:
        pod["spec"]["dnsPolicy"] = dns_policy
    return pod


# the node's own resolv.conf: the site's resolver (the lab DNS server on 10.244.1.11, which knows no cluster name)
NODE_RESOLV = f"nameserver {SERVER}\nsearch corp.example\n"


def _loop_api():
    objs = [
        o.kube_dns_service(),
        o.kube_dns_slice([(SERVER, False, "coredns-a")]),
        o.coredns_pod("coredns-a", SERVER, ready=False, restarts=9, waiting="CrashLoopBackOff", last="Error"),
    ]
    logs = {"kube-system/coredns-a#previous": ".:53\nCoreDNS-1.11.1\nlinux/amd64, go1.21.1\n" + o.LOOP_LINE + "\n"}
    return objs, logs


def _restarting_api():
    objs, logs = healthy_api()
    objs[1] = o.kube_dns_slice([(SERVER, True, "coredns-a"), ("10.244.2.9", True, "coredns-b")])
    objs.append(o.coredns_pod("coredns-b", "10.244.2.9", restarts=5, last="OOMKilled"))
    logs["kube-system/coredns-b"] = logs["kube-system/coredns-a"]
    logs["kube-system/coredns-b#previous"] = "[INFO] plugin/reload: Running configuration SHA512 = 1b226df\n"
    return objs, logs


SCENARIOS: dict[str, Scenario] = {
    "dns-healthy": Scenario(
        "A pod in namespace shop with ClusterFirst DNS: web, web.shop, the FQDN and kubernetes.default resolve over UDP and TCP "
        "through kube-proxy's rules to CoreDNS; kube-dns has a ready endpoint, CoreDNS is ready, its log is clean.",
        [],
    ),
    "dns-coredns-loop": Scenario(
        "CoreDNS forwards to itself (node resolv.conf → 127.0.0.53): its log shows plugin/loop, the pod is in CrashLoopBackOff, "
        "kube-dns has no ready endpoint, kube-proxy REJECTs queries to 10.96.0.10 (port unreachable).",
        ["KP130", "KP131", "KP132", "KP138"],
        kube_dns_endpoints=False,
        api=_loop_api(),
    ),
    "dns-other-namespace": Scenario(
        "The client pod is in namespace debug and diagnoses shop/web: 'web' searches web.debug.svc.cluster.local first — "
        "another Service named web there (10.96.7.7); web.shop and the FQDN resolve to shop/web.",
        ["KP136"],
        resolv=resolv("debug"),
    ),
    "dns-other-namespace-nxdomain": Scenario(
        "The client pod is in namespace tools, where no Service web exists: 'web' gives NXDOMAIN for every search-path name; "
        "web.shop resolves.",
        ["KP136"],
        resolv=resolv("tools"),
    ),
    "dns-ndots-musl": Scenario(
        "options ndots:1 (a custom dnsConfig): web.shop has one dot, so musl asks it only as it is (NXDOMAIN); glibc goes on "
        "through the search list and finds web.shop.svc.cluster.local.",
        ["KP135"],
        resolv=resolv(ndots=1),
    ),
    "dns-no-cluster-search": Scenario(
        "dnsPolicy-Default-like resolv.conf (search corp.example, ndots:1) pointing at the cluster DNS: the FQDN works, web and "
        "web.shop never get svc.cluster.local appended; kubernetes.default does not resolve either.",
        ["KP135", "KP139"],
        resolv=f"nameserver {DNS_IP}\nsearch corp.example\noptions ndots:1\n",
    ),
    "dns-tcp-blocked": Scenario(
        "53/TCP to CoreDNS is dropped (a NetworkPolicy or firewall allowing only UDP): UDP answers, TCP times out. One CoreDNS "
        "replica restarted 5 times (OOMKilled) and is ready again.",
        ["KP137", "KP131"],
        drop=("tcp",),
        api=_restarting_api(),
    ),
    "dns-truncated-no-tcp": Scenario(
        "Every UDP answer is truncated (TC=1) and 53/TCP is dropped: the resolver must retry over TCP and cannot.",
        ["KP137"],
        server_flags=("--truncate-udp",),
        drop=("tcp",),
    ),
    "dns-udp-blocked": Scenario(
        "53/UDP to CoreDNS is dropped, TCP answers: resolvers ask over UDP, so every lookup times out.",
        ["KP137"],
        drop=("udp",),
    ),
    "dns-timeout": Scenario(
        "Every DNS packet to CoreDNS is dropped (UDP and TCP): kube-dns has a ready endpoint and CoreDNS is ready, so the causes "
        "left are on the path (NetworkPolicy egress, kube-proxy, firewall).",
        ["KP138"],
        drop=("udp", "tcp"),
    ),
    "dns-refused": Scenario("The DNS server answers REFUSED to everything.", ["KP138"], server_flags=("--refuse",)),
    "dns-wrong-nameserver": Scenario(
        "The pod's nameserver is 10.244.1.11 directly, a DNS server that knows no cluster names (not the kube-dns ClusterIP "
        "10.96.0.10): the FQDN and kubernetes.default are NXDOMAIN.",
        ["KP133", "KP139"],
        resolv=resolv(nameserver=SERVER),
        records={"www.corp.example": "192.0.2.8"},
    ),
    "dns-search-limits": Scenario(
        "The node adds 5 long corporate search domains: the pod's search list has 8 domains and more than 256 characters; a "
        "nameserver line holds a name instead of an address.",
        ["KP134", "KP141"],
        resolv=resolv(
            extra_search=(
                "eu-west-1.compute.internal.corp-infrastructure.example.com",
                "datacenter-frankfurt.corp-infrastructure.example.com",
                "services.global.corp-infrastructure.example.com",
                "legacy.apps.corp-infrastructure.example.com",
                "k8s.platform.corp-infrastructure.example.com",
            ),
            lines="nameserver dns.corp.example\n",
        ),
    ),
    "dns-hostnetwork-clusterfirst": Scenario(
        "kpdiag svc asked from monitoring/node-agent-x7k2p, a hostNetwork DaemonSet pod whose dnsPolicy is unset "
        "(ClusterFirst) and which scrapes http://web.shop.svc.cluster.local: kubelet gives it the node's resolv.conf "
        "(the site's resolver, search corp.example), so the probe, run in the node's network namespace, finds no "
        "cluster name. KP142 names the pod spec as the cause of the resolv.conf findings.",
        ["KP142", "KP133", "KP139"],
        resolv=NODE_RESOLV,
        records={"www.corp.example": "192.0.2.8"},
        client_pod=_node_agent(None),
    ),
    "dns-hostnetwork-withhostnet": Scenario(
        "The same hostNetwork pod with dnsPolicy ClusterFirstWithHostNet: kubelet gives it the cluster's resolv.conf "
        "and every name resolves from the node's network namespace: not KP142.",
        [],
        client_pod=_node_agent("ClusterFirstWithHostNet"),
    ),
    "dns-ndots-amplification": Scenario(
        "A cloud node adds its DNS suffixes to every pod (search … cluster.local eu-west-1.compute.internal corp.example, "
        "ndots:5): an external name such as api.example.com is asked 10 times (A and AAAA in 5 search domains) before "
        "it is asked as it is; everything resolves (KP141, issue 26).",
        ["KP141"],
        resolv=resolv(extra_search=("eu-west-1.compute.internal", "corp.example")),
    ),
}


class DnsLab:
    """The lab for one scenario: build() then probe(); api_files() for the API side."""

    def __init__(self, lab, sc: Scenario, tmp: str):
        self.lab, self.sc, self.tmp = lab, sc, tmp

    def build(self) -> "DnsLab":
        from tests.lab.netlab import KubeNodeLab

        lab, sc = self.lab, self.sc
        k = KubeNodeLab.build(lab, pod_count=2)
        lab.route(
            "node", "default", "via", k.client_ip
        )  # a node has a default route: a ClusterIP is routed, then kube-proxy acts in FORWARD
        lab.sysctl(
            "node", "net.ipv4.icmp_ratelimit", "0"
        )  # every REJECT answered (the kernel's default limits ICMP errors per host)
        eps = [Endpoint(SERVER)] if sc.kube_dns_endpoints else []
        k.load_iptables(
            iptables_ruleset(
                [Service("kube-system", "kube-dns", DNS_IP, [Port("dns", 53, 53, "udp"), Port("dns-tcp", 53, 53)], eps)]
            )
        )
        with open(f"{self.tmp}/records.json", "w") as fh:
            json.dump(sc.records, fh)
        log = open(f"{self.tmp}/dnsserver.log", "w")
        lab.background(
            "pod1",
            [
                "env",
                f"PYTHONPATH={ROOT}",
                sys.executable,
                "-m",
                "tests.lab.dnsserver",
                "0.0.0.0",
                f"{self.tmp}/records.json",
                *sc.server_flags,
            ],
            log,
        )
        for proto in sc.drop:
            lab.sh("pod1", ["iptables", "-A", "INPUT", "-p", proto, "--dport", "53", "-j", "DROP"])
        lab.set_resolv(sc.role, sc.resolv)
        for _ in range(100):
            with open(f"{self.tmp}/dnsserver.log") as fh:
                if "ready" in fh.read():
                    break
            time.sleep(0.1)
        else:
            raise RuntimeError("the lab DNS server did not start")
        return self

    def probe(self, namespace="shop", name="web", deadline: float = 6.0, timeout: float = 3.0) -> tuple[dict, float]:
        start = time.monotonic()
        proc = self.lab.sh(
            self.sc.role,
            [
                sys.executable,
                "-m",
                "kpdiag.collect.dns",
                namespace,
                name,
                "--deadline",
                str(deadline),
                "--timeout",
                str(timeout),
            ],
            timeout=60,
        )
        return json.loads(proc.stdout), time.monotonic() - start

    def server_log(self) -> list[str]:
        with open(f"{self.tmp}/dnsserver.log") as fh:
            return fh.read().splitlines()


def api_files(objects: list, logs: dict) -> tuple[dict[str, bytes], list]:
    """cluster/dns-*.json as ClusterCollector.dns_objects() reads them from a real HTTP API server."""
    from kpdiag.collect.cluster import ClusterCollector
    from tests.apiserver import ApiServer

    with ApiServer(objects, pod_logs=logs) as api, tempfile.TemporaryDirectory() as d:
        cc = ClusterCollector(api.kubeconfig(d))
        cc.dns_objects()
        return dict(cc.out.files), list(cc.out.errors)


def bundle_files(probe_doc: dict, api: tuple, client_pod: dict | None = None) -> dict[str, bytes]:
    files, _ = api_files(*api)
    files["probes/dns.json"] = (json.dumps(probe_doc, indent=1) + "\n").encode()
    manifest = {
        "format": "kpdiag-bundle/1",
        "node": "lab-node",
        "kpdiag_version": "fixture",
        "errors": [],
        "created": "2026-12-03T09:00:00Z",
    }
    if client_pod is not None:  # who asked: the pod as kubectl get pods -A -o json prints it
        meta = client_pod["metadata"]
        manifest["client"] = {"namespace": meta["namespace"], "pod": meta["name"], "how": "--from"}
        listing = {"apiVersion": "v1", "kind": "List", "items": [client_pod]}
        files["cluster/pods.json"] = (json.dumps(listing, indent=1) + "\n").encode()
    files["kpdiag.json"] = json.dumps(manifest, indent=1, sort_keys=True).encode()
    return files


def analyze_files(files: dict[str, bytes]):
    from kpdiag.bundle.store import Bundle
    from kpdiag.commands.diagnose import analyze_state
    from kpdiag.state.node import NodeState

    return analyze_state(NodeState(Bundle.from_files("", files)), (), ())


def run_scenario(lab, name: str, tmp: str) -> tuple[dict, float, dict[str, bytes], DnsLab]:
    sc = SCENARIOS[name]
    dl = DnsLab(lab, sc, tmp).build()
    doc, took = dl.probe()
    return doc, took, bundle_files(doc, sc.api, sc.client_pod), dl


def write_fixture(out_dir: str, name: str, files: dict[str, bytes]) -> None:
    sc = SCENARIOS[name]
    for rel, data in files.items():
        path = os.path.join(out_dir, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data)
    scen = {
        "about": sc.about,
        "recorded": f"probes/dns.json: kpdiag's DNS probe run in {'the lab node (a hostNetwork pod)' if sc.role == 'node' else 'a lab pod'} against tests.lab.dnsserver behind kube-proxy's "
        "rules; cluster/dns-*.json: ClusterCollector.dns_objects() against tests.apiserver (python -m tests.dns.make_fixtures)",
        "expect": {"fires": sorted(sc.fires), "may_skip": sc.may_skip},
    }
    with open(os.path.join(out_dir, "scenario.json"), "w") as fh:
        json.dump(scen, fh, indent=1)
        fh.write("\n")

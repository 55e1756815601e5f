"""The IPVS kernel scenarios: kube-proxy-shaped IPVS nodes (tests.synth writes the rules the IPVS proxier
writes), the connections to send through them, and what kpdiag's analysis must say of each.

A scenario is plain JSON for the guest (``inside.py``): the iptables, ipset and ipvsadm texts to load, the
addresses bound on kube-ipvs0, sysctls, the pods' servers and the connections (origin, packet, count).
The kube-proxy side that has no process in the guest (its ConfigMap mode, the API's Services and
EndpointSlices) is added on the host to the bundle kpdiag collected in the guest, before ``kpdiag analyze``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from tests import k8sobjects as k8s
from tests.synth import Endpoint, Port, Service, ipvs_files

NODE_IP = "192.168.50.1"
CLIENT_IP = "192.168.50.2"
POD_IPS = {f"pod{i}": f"10.244.1.{10 + i}" for i in range(4)}
WEB_VIP, DNS_VIP, LB_IP = "10.96.0.20", "10.96.0.10", "192.168.50.200"
STRICT_ARP = {"net.ipv4.conf.all.arp_ignore": "1", "net.ipv4.conf.all.arp_announce": "2"}
KUBE_PROXY_SYSCTLS = {  # what kube-proxy's IPVS proxier sets (and the bridge setting kubelet needs)
    "net.ipv4.vs.conntrack": "1",
    "net.ipv4.vs.conn_reuse_mode": "1",  # kube-proxy leaves it as it is on kernels >= 5.9 (the default, 1)
    "net.ipv4.vs.expire_nodest_conn": "1",
    "net.ipv4.vs.expire_quiescent_template": "1",
    "net.ipv4.conf.all.route_localnet": "1",
    "net.bridge.bridge-nf-call-iptables": "1",
    "net.ipv4.tcp_keepalive_time": "600",  # below IPVS's 900 s TCP idle timeout (else KP310, rightly)
}


@dataclass
class Scenario:
    name: str
    about: str
    scheduler: str = "rr"
    weights: dict = field(default_factory=dict)  # endpoint ip → weight
    affinity: int | None = None  # sessionAffinity ClientIP timeout → ipvsadm -p
    sysctls: dict = field(default_factory=dict)
    strict_arp: bool = True
    lb: bool = False
    unbind: list = field(default_factory=list)  # ClusterIPs left off kube-ipvs0
    no_ipset: bool = False
    stale: list = field(default_factory=list)  # real servers kept in IPVS that the API no longer has
    extra_reals: list = field(default_factory=list)  # (vip:port, ip:port) added to IPVS and to the API
    fires: list = field(default_factory=list)  # kpdiag analyze must give exactly these (with the API objects)
    connections: list = field(default_factory=list)
    arp: list = field(default_factory=list)
    hide_ipvs_modules: bool = False
    web_endpoints: tuple = ("pod0", "pod1", "pod2")
    node_cmds: list = field(default_factory=list)
    collect: str = "commands"  # "kpdiag": kpdiag collect in the guest (netlink), compared with ipvsadm -Sn
    bulk: int = 0  # more Services (bulk/svc-N), each a virtual server with real servers (every tenth a NodePort)
    focus: list = field(default_factory=list)  # Services read focused too (kpdiag node --service's read), NS/NAME


def web_service(sc: Scenario) -> Service:
    eps = [Endpoint(POD_IPS[p]) for p in sc.web_endpoints]
    return Service(
        "shop",
        "web",
        WEB_VIP,
        [Port("http", 80, 8080, node_port=30080)],
        eps,
        lb_ips=[LB_IP] if sc.lb else [],
        affinity_seconds=sc.affinity,
    )


def dns_service() -> Service:
    return Service(
        "kube-system",
        "kube-dns",
        DNS_VIP,
        [Port("dns", 53, 53, "udp"), Port("dns-tcp", 53, 53, "tcp")],
        [Endpoint(POD_IPS["pod3"])],
    )


def bulk_ip(i: int) -> str:
    return f"10.97.{i // 250}.{i % 250 + 1}"


def bulk_node_port(i: int) -> int | None:
    return 30100 + i // 10 if i % 10 == 0 else None  # within the NodePort range (its bitmap ipset)


def bulk_services(n: int) -> list[Service]:
    pods = [POD_IPS[p] for p in ("pod0", "pod1", "pod2")]
    return [
        Service(
            "bulk",
            f"svc-{i}",
            bulk_ip(i),
            [Port("http", 80, 8080, node_port=bulk_node_port(i))],
            [Endpoint(pods[i % 3]), Endpoint(pods[(i + 1) % 3])],
        )
        for i in range(n)
    ]


def services(sc: Scenario) -> list[Service]:
    return [web_service(sc), dns_service()] + bulk_services(sc.bulk)


def ipvs_restore(save: str, sc: Scenario) -> str:
    """ipvsadm -Sn text as ipvsadm -R reads it, with the scenario's stale/extra real servers."""
    lines = save.splitlines()
    for vip, real in [(f"{WEB_VIP}:80", s) for s in sc.stale] + list(sc.extra_reals):
        lines.append(f"-a -t {vip} -r {real} -m -w 1")
    return "\n".join(lines) + "\n"


def guest_spec(sc: Scenario) -> dict:
    files = ipvs_files(services(sc), node_ip=NODE_IP, weights=sc.weights, scheduler=sc.scheduler)
    addrs = json.loads(files["node/ip-addr.json"])
    bound = [a["local"] for i in addrs if i["ifname"] == "kube-ipvs0" for a in i["addr_info"]]
    bound = [ip for ip in bound if ip not in sc.unbind]
    ipset, iptables = files["node/ipset.txt"], files["node/iptables-save.txt"]
    ipset = "".join(line + "\n" for line in dict.fromkeys(ipset.splitlines()))  # a set holds an entry once
    if sc.no_ipset:
        ipset = ""
        iptables = "\n".join(line for line in iptables.splitlines() if "--match-set" not in line) + "\n"
    sysctls = dict(KUBE_PROXY_SYSCTLS)
    if sc.strict_arp:
        sysctls.update(STRICT_ARP)
    sysctls.update(sc.sysctls)
    return {
        "name": sc.name,
        "sysctls": sysctls,
        "bound": bound,
        "ipset": ipset,
        "iptables": iptables,
        "ipvsadm": ipvs_restore(files["node/ipvsadm.txt"], sc),
        "servers": {p: ["tcp:8080"] for p in ("pod0", "pod1", "pod2")} | {"pod3": ["udp:53", "tcp:53", "tcp:8080"]},
        "connections": sc.connections,
        "arp": sc.arp,
        "hide_ipvs_modules": sc.hide_ipvs_modules,
        "node_cmds": sc.node_cmds,
        "collect": sc.collect,
        "focus": [{"service": f, "object": _api_service(sc, f)} for f in sc.focus],
        "packets": trace_packets(sc),
    }


def trace_packets(sc: Scenario) -> list[dict]:
    """The packets a live ``kpdiag trace`` follows in the guest, focused and whole (kpdiag/collect/dest_rules.py):
    to each focused Service's ClusterIPs (from a client, the node and a pod), NodePorts and load-balancer IPs (from a
    client), plus a port and an address no virtual server has."""
    out = []
    for f in sc.focus:
        spec, status = _api_service(sc, f)["spec"], _api_service(sc, f).get("status") or {}
        lbs = [i["ip"] for i in (status.get("loadBalancer") or {}).get("ingress") or []]
        for p in spec.get("ports") or []:
            proto = str(p.get("protocol") or "TCP").lower()
            for ip in spec.get("clusterIPs") or [spec["clusterIP"]]:
                out += [dict(src=src, frm=frm, dst=ip, dport=p["port"], proto=proto) for src, frm in ORIGINS]
            for ip in lbs:
                out.append(dict(src=CLIENT_IP, frm="external", dst=ip, dport=p["port"], proto=proto))
            if p.get("nodePort"):
                out.append(dict(src=CLIENT_IP, frm="external", dst=NODE_IP, dport=p["nodePort"], proto=proto))
    if out:
        out.append(dict(src=CLIENT_IP, frm="external", dst=WEB_VIP, dport=81, proto="tcp"))  # a port it lacks
        out.append(dict(src=POD_IPS["pod0"], frm="pod", dst="10.96.250.250", dport=80, proto="tcp"))  # no Service
    return out


ORIGINS = [(CLIENT_IP, "external"), (NODE_IP, "node"), (POD_IPS["pod0"], "pod")]


def _api_service(sc: Scenario, service: str) -> dict:
    ns, name = service.split("/")
    (doc,) = [
        s
        for s in api_objects(sc)["cluster/services.json"]["items"]
        if (s["metadata"]["namespace"], s["metadata"]["name"]) == (ns, name)
    ]
    return doc


def api_objects(sc: Scenario) -> dict[str, dict]:
    """cluster/services.json and endpointslices.json as the API would list them for this scenario."""
    web = web_service(sc)
    svc_web = k8s.service(
        "shop",
        "web",
        WEB_VIP,
        [k8s.port(80, 8080, "http", node_port=30080)],
        selector={"app": "web"},
        type_="LoadBalancer" if sc.lb else "NodePort",
        **({"sessionAffinity": "ClientIP"} if sc.affinity else {}),
    )
    if sc.lb:
        svc_web["status"] = {"loadBalancer": {"ingress": [{"ip": LB_IP}]}}
    svc_dns = k8s.service(
        "kube-system",
        "kube-dns",
        DNS_VIP,
        [k8s.port(53, 53, "dns", "UDP"), k8s.port(53, 53, "dns-tcp", "TCP")],
        selector={"k8s-app": "kube-dns"},
    )
    web_eps = [(e.ip, sc.weights.get(e.ip, 1) > 0, "node-a", f"web-{i}") for i, e in enumerate(web.endpoints)]
    extra = {real.split(":")[0] for _, real in sc.extra_reals}
    web_eps += [(ip, True, "node-a", f"extra-{i}") for i, ip in enumerate(sorted(extra))]
    terminating = {ip for ip, w in sc.weights.items() if w == 0}  # weight 0: endpoints the API says are going away
    slices = [
        k8s.endpointslice("shop", "web", web_eps, [("http", 8080, "TCP")]),
        k8s.endpointslice(
            "kube-system",
            "kube-dns",
            [(POD_IPS["pod3"], True, "node-a", "coredns-0")],
            [("dns", 53, "UDP"), ("dns-tcp", 53, "TCP")],
        ),
    ]
    for ep in slices[0]["endpoints"]:
        if ep["addresses"][0] in terminating:
            ep["conditions"] = {"ready": False, "serving": False, "terminating": True}
    bulk = []
    for i, b in enumerate(bulk_services(sc.bulk)):
        np = bulk_node_port(i)
        bulk.append(
            k8s.service(
                "bulk",
                b.name,
                b.cluster_ip,
                [k8s.port(80, 8080, "http", node_port=np)],
                selector={"app": b.name},
                type_="NodePort" if np else "ClusterIP",
            )
        )
        eps = [(e.ip, True, "node-a", f"{b.name}-{j}") for j, e in enumerate(b.endpoints)]
        slices.append(k8s.endpointslice("bulk", b.name, eps, [("http", 8080, "TCP")]))
    lst = lambda items: {"apiVersion": "v1", "kind": "List", "items": items}  # noqa: E731
    return {"cluster/services.json": lst([svc_web, svc_dns] + bulk), "cluster/endpointslices.json": lst(slices)}


def conn(origin: str, dst: str, dport: int, count: int, sport: int, proto: str = "tcp", timeout: float = 2.0) -> dict:
    return {
        "origin": origin,
        "dst": dst,
        "dport": dport,
        "count": count,
        "sport": sport,
        "proto": proto,
        "timeout": timeout,
    }


HEALTHY_CONNS = [
    conn("client", WEB_VIP, 80, 6, 41000),  # external → ClusterIP (rr: 2 each)
    conn("client", NODE_IP, 30080, 3, 41100),  # external → NodePort
    conn("pod0", WEB_VIP, 80, 6, 41200),  # pod → Service, hairpin included (pod0 is an endpoint)
    conn("node", WEB_VIP, 80, 3, 41300),  # the node itself → ClusterIP
    conn("pod1", DNS_VIP, 53, 2, 41400, "udp"),  # DNS over UDP
    conn("pod1", DNS_VIP, 53, 2, 41500, "tcp"),  # DNS over TCP
]

SCENARIOS = [
    Scenario(
        "healthy",
        "kube-proxy's IPVS state for shop/web (NodePort) and kube-dns, strictARP on.",
        connections=HEALTHY_CONNS,
        collect="kpdiag",
    ),
    Scenario(
        "sched-wrr",
        "wrr with weights 2:1:1",
        scheduler="wrr",
        weights={POD_IPS["pod0"]: 2},
        connections=[conn("client", WEB_VIP, 80, 8, 42000)],
    ),
    Scenario("sched-sh", "source hashing", scheduler="sh", connections=[conn("client", WEB_VIP, 80, 4, 42100)]),
    Scenario("sched-lc", "least-connection", scheduler="lc", connections=[conn("client", WEB_VIP, 80, 3, 42200)]),
    Scenario("sched-dh", "destination hashing", scheduler="dh", connections=[conn("client", WEB_VIP, 80, 3, 42210)]),
    Scenario("sched-nq", "never queue", scheduler="nq", connections=[conn("client", WEB_VIP, 80, 3, 42220)]),
    Scenario(
        "sched-wlc",
        "weighted least-connection, weights 2:1:1",
        scheduler="wlc",
        weights={POD_IPS["pod0"]: 2},
        connections=[conn("client", WEB_VIP, 80, 4, 42230)],
    ),
    Scenario(
        "sched-sed", "shortest expected delay", scheduler="sed", connections=[conn("client", WEB_VIP, 80, 3, 42300)]
    ),
    Scenario(
        "persistence",
        "sessionAffinity ClientIP: ipvsadm -p 60",
        affinity=60,
        connections=[conn("client", WEB_VIP, 80, 6, 42400)],
    ),
    Scenario(
        "graceful-termination",
        "pod2 is terminating: weight 0, takes no new connection",
        weights={POD_IPS["pod2"]: 0},
        fires=[],
        connections=[conn("client", WEB_VIP, 80, 6, 42500)],
    ),
    Scenario(
        "not-bound",
        "the ClusterIP of shop/web is not bound on kube-ipvs0",
        unbind=[WEB_VIP],
        fires=["KP304"],
        connections=[conn("client", WEB_VIP, 80, 2, 42600)],
    ),
    Scenario(
        "strict-arp-off",
        "a LoadBalancer IP on kube-ipvs0 and strictARP off: the node answers ARP for it",
        lb=True,
        strict_arp=False,
        sysctls={"net.ipv4.conf.all.arp_ignore": "0", "net.ipv4.conf.all.arp_announce": "0"},
        fires=["KP307"],
        arp=[LB_IP],
        collect="kpdiag",
    ),
    Scenario(
        "strict-arp-on",
        "a LoadBalancer IP on kube-ipvs0 and strictARP on: no ARP answer for it",
        lb=True,
        strict_arp=True,
        fires=[],
        arp=[LB_IP],
    ),
    Scenario(
        "stale-real-server",
        "IPVS still sends to 10.244.1.13:8080, which the API no longer has",
        stale=[f"{POD_IPS['pod3']}:8080"],
        fires=["KP303"],
        connections=[conn("client", WEB_VIP, 80, 8, 42700)],
        collect="kpdiag",
    ),
    Scenario(
        "ipset-missing",
        "kube-proxy's ipsets (and the rules that match them) are missing",
        no_ipset=True,
        fires=["KP308"],
        connections=[conn("client", WEB_VIP, 80, 3, 42800)],
    ),
    Scenario(
        "vs-conntrack-off",
        "net.ipv4.vs.conntrack=0: iptables never sees IPVS's connections, so the hairpin masquerade does not happen",
        sysctls={"net.ipv4.vs.conntrack": "0"},
        fires=["KP306"],
        connections=[conn("pod0", WEB_VIP, 80, 6, 42900)],
    ),
    Scenario(
        "expire-nodest-off",
        "expire_nodest_conn=0 and conn_reuse_mode=0 on a kernel >= 5.9",
        sysctls={"net.ipv4.vs.expire_nodest_conn": "0", "net.ipv4.vs.conn_reuse_mode": "0"},
        fires=["KP306"],
        connections=[conn("client", WEB_VIP, 80, 3, 43000)],
    ),
    Scenario(
        "no-destination",
        "shop/web's only real server has weight 0",
        web_endpoints=("pod0",),
        weights={POD_IPS["pod0"]: 0},
        connections=[conn("client", WEB_VIP, 80, 2, 43100)],
    ),
    Scenario(
        "unroutable-real-server",
        "a real server 10.250.0.5:8080 the node has no route to",
        extra_reals=[(f"{WEB_VIP}:80", "10.250.0.5:8080")],
        web_endpoints=("pod0",),
        connections=[conn("client", WEB_VIP, 80, 4, 43200)],
    ),
    Scenario(
        "no-route",
        "an address no route covers, on a node without a default route",
        connections=[conn("client", "10.99.0.7", 80, 1, 43300)],
    ),
    Scenario(
        "focused-many",
        "300 more Services: kpdiag node --service's read (virtual servers one by one over netlink) of three of them",
        bulk=300,
        lb=True,
        collect="kpdiag",
        focus=["shop/web", "kube-system/kube-dns", "bulk/svc-120"],
    ),
    Scenario(
        "no-ipvs-modules",
        "the kernel cannot do IPVS (modules absent): --preflight ipvs before and after",
        hide_ipvs_modules=True,
        sysctls=KUBE_PROXY_SYSCTLS,
    ),
]
BY_NAME = {s.name: s for s in SCENARIOS}

"""Routes to the other nodes' pod CIDRs: a CNI that routes pod traffic by the Nodes' podCIDRs (flannel, kube-router)
installs one route per remote node's podCIDR; one that is missing leaves that node's pods behind the default route.
Other CNIs (Calico's IPAM blocks, eBPF, cloud and OVS routing) are not judged: kpdiag/state/cni.py says why."""

from __future__ import annotations

import ipaddress
from typing import Optional

from kpdiag.checkapi import Skip, check
from kpdiag.fixcmd import FixStep, command, note
from kpdiag.model import Evidence
from kpdiag.parse.addr import parse_ip
from kpdiag.bundle import sources
from kpdiag.state.typed_api import NodePodCIDRs
from kpdiag.state.typed_node import Addresses, Cni, Manifest, Routes

from .shapes import d, links, lst, s


FLANNEL = "flannel.alpha.coreos.com/"


def _same_node(name: str, me: str) -> bool:
    a, b = name.lower(), (me or "").lower()
    return bool(b) and (a == b or a.split(".", 1)[0] == b.split(".", 1)[0])


def _pod_families(addresses: Addresses, model) -> set[int]:
    """The address families this node's pods use, as the CNI's own devices show them (an IPv4-only flannel in a
    dual-stack cluster routes no IPv6 pod range); both when the devices hold none yet."""
    devs = {"flannel.1", "flannel-wg", "flannel-v6.1", "flannel-wg-v6"} | (
        {model.shape.bridge} if model.shape else set()
    )
    seen = set()
    for link in links(addresses.links):
        if link.get("ifname") in devs:
            for a in link.get("addr_info") or []:
                if a.get("scope", "global") == "global" and isinstance(a.get("local"), str):
                    seen.add(6 if ":" in a["local"] else 4)
    return seen or {4, 6}


def _pod_cidrs(node: dict) -> list[str]:
    spec = d(node.get("spec"))
    cidrs = lst(spec.get("podCIDRs")) or [spec.get("podCIDR")]
    return [c for c in cidrs if isinstance(c, str)]


def _node_ip(node: dict) -> str | None:
    for a in lst(d(node.get("status")).get("addresses")):
        if isinstance(a, dict) and a.get("type") == "InternalIP":
            return a.get("address")
    return None


def _route_text(route) -> str:
    via = f" via {route.gateway}" if route.gateway else ""
    dev = f" dev {route.dev}" if route.dev else ""
    return f"{route.dst}{via}{dev}".strip()


def _local_addrs(addresses: Addresses) -> list:
    """Every address on this node's links."""
    local = []
    for link in links(addresses.links):
        for a in link.get("addr_info") or []:
            try:
                local.append(ipaddress.ip_address(a.get("local")))
            except (TypeError, ValueError):
                continue
    return local


def _remote_cidrs(items: list, model, me: str, addresses: Addresses) -> list:
    """(node name, pod CIDR, Node) of the other nodes' pod ranges this node's pods use — flannel's nodes only when
    flannel annotated some."""
    local = _local_addrs(addresses)
    remote = []
    families = _pod_families(addresses, model)
    flannel_nodes = [n for n in items if any(k.startswith(FLANNEL) for k in d(d(n.get("metadata")).get("annotations")))]
    mine = {str(a) for a in local}
    for n in flannel_nodes if model.name in ("flannel", "canal") and flannel_nodes else items:
        name = s(d(n.get("metadata")).get("name")) or "?"
        if _same_node(name, me) or _node_ip(n) in mine:
            continue  # this node (its Node's name may be the host's FQDN or short name)
        for cidr in _pod_cidrs(n):
            try:
                net = ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                continue
            if net.version not in families or any(a in net for a in local if a.version == net.version):
                continue  # a family this node's pods do not use, or this node's own range
            remote.append((name, net, n))
    return remote


def _routed(remote: list, routing) -> tuple[list, list]:
    """(missing, present): the remote pod ranges only the default route covers (name, net, Node, default route), and
    those with a route of their own (name, net, route)."""
    missing, present = [], []
    for name, net, n in remote:
        if not routing.knows(net.version):
            continue
        routes = [routing.lookup(*parse_ip(str(a))) for a in (net.network_address, net.broadcast_address)]
        if any(r is None or r.type != "unicast" for r in routes):
            continue  # blackhole/unreachable: KP602 names those for the endpoints behind them
        if any(r.dst == "default" for r in routes):
            missing.append((name, net, n, next(r for r in routes if r.dst == "default")))
        else:
            present.append((name, net, routes[0]))
    return missing, present


def _fix(cni: str, missing: list, present: list) -> list[FixStep]:
    """Look at the route, restart the CNI's agent, read its record of the node; restore the route by hand (a note)."""
    name, net, node, default = missing[0]
    dev = next((p[2].dev for p in present if p[2].dev), None)
    ip = _node_ip(node)
    if dev and dev.startswith(("flannel", "vxlan")):
        restore = f"ip route replace {net} via {net.network_address} dev {dev} onlink   # flannel's VXLAN route form; the agent re-adds it on restart"
    elif ip:
        restore = (
            f"ip route replace {net} via {ip}   # host-gw/BGP form: via the node's InternalIP (if it shares the subnet)"
        )
    else:
        restore = None
    fix = [
        f"ip route get {net.network_address + 1}   # now: {_route_text(default)} (the default route)",
        {
            "flannel (VXLAN)": "kubectl -n kube-flannel delete pod --field-selector spec.nodeName=<this node> -l app=flannel   "
            "# restart flannel here (namespace kube-system on older installs)",
            "flannel (WireGuard)": "kubectl -n kube-flannel delete pod --field-selector spec.nodeName=<this node> -l app=flannel",
            "flannel (host-gw)": "kubectl -n kube-flannel delete pod --field-selector spec.nodeName=<this node> -l app=flannel",
        }.get(
            cni,
            "kubectl -n kube-system get pods -o wide | grep -iE 'flannel|kube-router'   # restart the agent on this node",
        ),
        f"kubectl get node {name} -o jsonpath='{{.metadata.annotations}}'   # the CNI's record of that node (flannel: public-ip, backend-data)",
    ]
    if restore:
        fix.append(note(f"to restore at once (the CNI may overwrite it): {restore}"))
    return [s if isinstance(s, FixStep) else command(s) for s in fix]


def _finding(new, missing: list, present: list, model, route_src: str, nodes_src: str):
    """The one finding: the nodes whose pod range only the default route covers."""
    cni = model.label
    name, _net, _node, default = missing[0]
    names = ", ".join(f"{m[0]} ({m[1]})" for m in missing[:5])
    return new(
        f"no route to the pod CIDR of {names}: only the default route ({_route_text(default)}) covers it, so traffic to "
        f"pods on {'that node' if len(missing) == 1 else 'those nodes'} leaves for the gateway instead of the {cni} "
        f"overlay ({len(present)} other node(s) have their route)",
        fix=tuple(_fix(cni, missing, present)),
        evidence=[Evidence(nodes_src, f"node {m[0]}: podCIDR {m[1]}") for m in missing[:3]]
        + [Evidence(route_src, f"{m[1]}: matched only by {_route_text(m[3])}") for m in missing[:3]]
        + [Evidence(route_src, f"{p[1]} ({p[0]}): {_route_text(p[2])}") for p in present[:2]]
        + [Evidence(src, f"CNI: {cni} ({text})") for src, text in model.signs[:1]],
        subject=name,
        data={
            "cni": cni,
            "missing": [{"node": m[0], "pod_cidr": str(m[1]), "route": _route_text(m[3])} for m in missing],
            "present": [{"node": p[0], "pod_cidr": str(p[1]), "route": _route_text(p[2])} for p in present],
        },
    )


@check(
    "KP610",
    "pod-cidr-route-missing",
    "No route to another node's pod CIDR: its pods are behind the default route",
    "error",
    symptom="Pods on one node cannot reach pods on one other node (and Service connections DNATed to those pods time "
    "out), while every other node pair works; ping of that node's pods leaves through the default gateway.",
    why="""
        flannel and kube-router route pod traffic by the Nodes' podCIDRs: for every other node they install a route
        for that node's podCIDR (flannel VXLAN: "10.244.2.0/24 via 10.244.2.0 dev flannel.1 onlink"; host-gw and
        kube-router: via the node's address). When one of those routes is missing — the agent on this node missed the node's lease or
        its annotation, crashed, or the route was flushed — packets to that node's pods match only the default route
        and leave for the gateway, which drops them or sends them somewhere else. KP602 sees blackhole/unreachable
        routes; this is the silent case, where the default route hides the gap. CNIs that do not route per node on
        the node are not judged: Calico routes its own IPAM blocks (not the Nodes' podCIDRs), Cilium and Calico eBPF
        forward in BPF, cloud CNIs leave pod routing to the VPC, Antrea and OVN-Kubernetes switch it in Open vSwitch,
        and a CNI kpdiag does not recognise gets no verdict.
    """,
    fix="Restart the CNI agent on this node (it re-adds the routes of every node it knows) and check why it missed the "
    "node: its log, the node's annotations (flannel: flannel.alpha.coreos.com/public-ip, backend-data).",
)
def pod_cidr_route_missing(
    new,
    route_list: Routes,
    addresses: Addresses,
    nodes: NodePodCIDRs,
    cni_model: Cni,
    manifest: Optional[Manifest] = None,
):
    items = list(nodes.objects)
    model = cni_model.model
    not_judged = model.route_verdicts()
    if not_judged:
        raise Skip(not_judged)
    routing = route_list.routing
    if not routing.has_routes:
        raise Skip("no routes known for this node")
    me = manifest.node if manifest is not None else ""
    remote = _remote_cidrs(items, model, me, addresses)
    if not remote:
        raise Skip(
            f"{nodes.source} names no other node with a podCIDR (kpdiag reads this node's Node only: "
            f"kubectl get nodes -o json > {sources.NODES} in the bundle lets it compare them all)"
        )
    missing, present = _routed(remote, routing)
    if missing:
        yield _finding(new, missing, present, model, route_list.source, nodes.source)

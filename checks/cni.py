"""The CNI's own state against the API's record of the nodes: the pod bridge's address, a node without a podCIDR,
flannel's and Calico's record of each node's address and VTEP, pod ranges over the node's own network. Each asks the
CNI model (kpdiag/state/cni.py) first and judges only the CNI it is about."""

from __future__ import annotations

import ipaddress
import json
from typing import Optional

from kpdiag.checkapi import Skip, check
from kpdiag.fixcmd import command, note
from kpdiag.model import Evidence
from kpdiag.state.typed_api import CalicoNodes, FlannelNodes, NodeObjects
from kpdiag.state.typed_node import Addresses, Cni, Manifest, Routes
from kpdiag.state.typed_proxy import KubeProxyRules

from .shapes import links

FLANNEL = "flannel.alpha.coreos.com/"
# interfaces whose address is never the node's address for other nodes: container bridges, CNI bridges, VMs'
NOT_NODE_NETWORKS = ("docker", "br-", "virbr", "cni", "cali", "flannel", "vxlan", "tunl", "lxc", "cilium", "kube-")
CALICO_ADDR = "projectcalico.org/IPv4Address"


def _internal_ips(obj: dict) -> list[str]:
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    out = []
    for a in status.get("addresses") or []:
        if isinstance(a, dict) and a.get("type") == "InternalIP" and isinstance(a.get("address"), str):
            try:
                ipaddress.ip_address(a["address"])
            except ValueError:
                continue
            out.append(a["address"])
    return out


def _external_ips(obj: dict) -> set[str]:
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    return {
        a.get("address")
        for a in status.get("addresses") or []
        if isinstance(a, dict) and a.get("type") == "ExternalIP" and isinstance(a.get("address"), str)
    }


def _net(text: str):
    """A CIDR from the API, or None when it is not one (a malformed podCIDR is the API's problem, not a crash)."""
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except (ValueError, AttributeError):
        return None


def _find(nodes: NodeObjects, name: str) -> dict | None:
    """This node's Node: by name as the manifest has it, else case-insensitively, else short name against FQDN
    (the manifest's name is the host's, which may be the FQDN, or only its first label)."""
    if not name:
        return None
    exact = nodes.named(name)
    if exact is not None:
        return exact
    want = name.lower()
    for o in nodes.objects:
        have = nodes.name(o).lower()
        if have == want or have.split(".", 1)[0] == want.split(".", 1)[0]:
            return o
    return None


def _podcidr_is_the_range(model, nodes: NodeObjects, me: dict) -> None:
    """Skip unless this node's pod range is its podCIDR: flannel uses it only with its Kubernetes subnet manager
    (the Node then carries flannel.alpha.coreos.com/kube-subnet-manager); with etcd, flannel leases its own."""
    if model.name in ("flannel", "canal") and nodes.annotation(me, FLANNEL + "kube-subnet-manager") != "true":
        raise Skip(
            "flannel's subnets come from the Nodes' podCIDRs only with its Kubernetes subnet manager, and this Node "
            f"has no {FLANNEL}kube-subnet-manager annotation (an etcd-backed flannel leases its own)"
        )


def _me(nodes: NodeObjects, manifest: Manifest | None) -> dict:
    me = _find(nodes, manifest.node) if manifest is not None else None
    if me is None:
        raise Skip(
            f"this node ({(manifest.node if manifest else '') or 'name unknown'}) is not among the Nodes of {nodes.source}"
        )
    return me


def _addresses(addresses: Addresses, ifname: str | None = None) -> list[tuple[str, ipaddress.IPv4Interface]]:
    """(interface, address/prefix) of the node's global IPv4 addresses (of one interface when named)."""
    out = []
    for link in links(addresses.links):
        if ifname is not None and link.get("ifname") != ifname:
            continue
        for a in link.get("addr_info") or []:
            if a.get("family") not in (None, "inet") or a.get("scope") not in (None, "global"):
                continue
            try:
                out.append(
                    (str(link.get("ifname")), ipaddress.IPv4Interface(f"{a.get('local')}/{a.get('prefixlen', 32)}"))
                )
            except (TypeError, ValueError):
                continue
    return out


@check(
    "KP630",
    "cni-bridge-stale-address",
    "The pod bridge keeps an address outside this node's podCIDR (a re-joined node)",
    "error",
    symptom='New pods on this node stay in ContainerCreating: \'failed to set bridge addr: "cni0" already has an IP '
    "address different from 10.244.x.1/24'; pods created before keep addresses other nodes route elsewhere.",
    why="""
        flannel and kube-router give pods addresses from this node's spec.podCIDR and put the first address on the
        pod bridge (cni0, kube-bridge). When a node is removed and joins again it may get another podCIDR, but the
        bridge keeps the old address: the bridge plugin refuses to configure a bridge whose address differs, so no new
        pod starts, and the other nodes route the old range to whichever node now owns it.
    """,
    fix="Delete the stale bridge so the CNI recreates it with the new address (ip link delete cni0), then restart the "
    "CNI agent and the pods on this node.",
    cni=("flannel", "kube-router"),
)
def cni_bridge_stale_address(
    new, cni_model: Cni, addresses: Addresses, nodes: NodeObjects, manifest: Optional[Manifest] = None
):
    model = cni_model.model
    if model.shape is None or not model.shape.bridge or model.routing != "node-podcidr":
        raise Skip(
            f"about CNIs whose pods hang off a bridge numbered from the podCIDR; this node's CNI is {model.label}"
        )
    bridge = model.shape.bridge
    me = _me(nodes, manifest)
    name = nodes.name(me)
    _podcidr_is_the_range(model, nodes, me)
    cidrs = [n for n in (_net(c) for c in nodes.pod_cidrs(me) if ":" not in c) if n is not None]
    if not cidrs:
        raise Skip(f"this node's Node has no IPv4 podCIDR in {nodes.source} (KP631 judges that)")
    held = _addresses(addresses, bridge)
    if not held:
        raise Skip(f"{bridge} holds no IPv4 address (no pod on this node yet)")
    stale = [a for _, a in held if not any(a.ip in c for c in cidrs)]
    if not stale:
        return
    want = next(iter(cidrs[0].hosts()))
    yield new(
        f"{bridge} holds {stale[0]}, outside this node's podCIDR {cidrs[0]}: the {model.label} bridge kept the address "
        "of an earlier podCIDR, so new pods here cannot be wired (the bridge plugin refuses a bridge with another "
        "address)",
        fix=(
            command(f"ip -4 addr show dev {bridge}   # now: {stale[0]}; the podCIDR wants {want}/{cidrs[0].prefixlen}"),
            command(f"ip link delete {bridge}   # the CNI recreates it with the address of the new podCIDR"),
            command(
                f"kubectl delete pod -A --field-selector spec.nodeName={name}   # their controllers recreate "
                "them with addresses from the new range"
            ),
        ),
        evidence=[
            Evidence(addresses.source, f"{bridge}: inet {stale[0]}"),
            Evidence(nodes.source, f"node {name}: podCIDR {', '.join(map(str, cidrs))}"),
        ],
        subject=bridge,
        data={"bridge": bridge, "address": str(stale[0]), "pod_cidrs": [str(c) for c in cidrs]},
    )


@check(
    "KP631",
    "node-without-pod-cidr",
    "This node has no podCIDR, and its CNI needs one",
    "error",
    explains=("KP610",),  # its agent cannot start, so it never adds the routes to the other nodes' pods
    symptom="Every pod on this node stays in ContainerCreating; the CNI agent logs 'failed to acquire lease' or "
    "'node ... pod cidr not assigned' and restarts.",
    why="""
        flannel and kube-router take each node's pod range from its Node's spec.podCIDR, which kube-controller-manager
        allocates only with --allocate-node-cidrs=true and a --cluster-cidr (kubeadm's podSubnet). A node without one
        gets no subnet: its agent cannot start, no pod here gets an address, and no other node has a route to it.
    """,
    fix="Start kube-controller-manager with --allocate-node-cidrs=true --cluster-cidr=<pod range> (kubeadm: "
    "networking.podSubnet), or give the Node a podCIDR once (kubectl patch node), then restart the CNI agent.",
    cni=("node-podcidr",),
)
def node_without_pod_cidr(new, cni_model: Cni, nodes: NodeObjects, manifest: Optional[Manifest] = None):
    model = cni_model.model
    me = _me(nodes, manifest)
    name = nodes.name(me)
    _podcidr_is_the_range(model, nodes, me)
    if nodes.pod_cidrs(me):
        return
    others = [(nodes.name(o), nodes.pod_cidrs(o)) for o in nodes.objects if o is not me and nodes.pod_cidrs(o)]
    yield new(
        f"node {name} has no spec.podCIDR, and {model.label} takes each node's pod range from it: no pod on "
        f"this node can get an address"
        + (f" ({len(others)} other node(s) have one, e.g. {others[0][0]}: {others[0][1][0]})" if others else ""),
        fix=(
            command(
                "kubectl -n kube-system get pod -l component=kube-controller-manager -o yaml | grep -E "
                "'allocate-node-cidrs|cluster-cidr'   # both must be set (k3s/RKE2: the server's --cluster-cidr)"
            ),
            command(
                f'kubectl patch node {name} -p \'{{"spec":{{"podCIDR":"<free /24 of the pod range>"}}}}\''
                "   # a podCIDR can be set once"
            ),
            note("then restart the CNI agent on this node"),
        ),
        evidence=[Evidence(nodes.source, f"node {name}: no spec.podCIDR")]
        + [Evidence(nodes.source, f"node {n}: podCIDR {c[0]}") for n, c in others[:1]]
        + [Evidence(src, f"CNI: {model.label} ({text})") for src, text in model.signs[:1]],
        subject=name,
        data={"node": name, "cni": model.label},
    )


@check(
    "KP632",
    "flannel-public-ip",
    "flannel publishes a node address that other nodes cannot reach it on",
    "error",
    symptom="Pods reach pods on their own node only; cross-node pod traffic and Services whose endpoints are on other "
    "nodes time out. Often on VirtualBox/Vagrant nodes, whose first interface is a NAT with the same address on every "
    "node (10.0.2.15).",
    why="""
        flannel picks the interface of the default route unless told (--iface, --iface-regex, --public-ip) and
        publishes its address in the Node's flannel.alpha.coreos.com/public-ip annotation; every other node sends this
        node's pod traffic there. When two nodes publish the same address (a NAT interface with one address on every
        node) or a node publishes an address it does not hold, the overlay sends packets to the wrong host or nowhere.
    """,
    fix="Tell flannel which interface carries node-to-node traffic (kube-flannel's args: --iface=<if> or "
    "--iface-regex, or the Node annotation flannel.alpha.coreos.com/public-ip-overwrite) and restart it on every node.",
    cni=("flannel", "canal"),
)
def flannel_public_ip(new, addresses: Addresses, nodes: FlannelNodes, manifest: Optional[Manifest] = None):
    published = [(nodes.name(o), ip) for o in nodes.objects if (ip := nodes.annotation(o, FLANNEL + "public-ip"))]
    if not published:
        raise Skip(f"no Node in {nodes.source} carries flannel's public-ip annotation")
    by_ip: dict[str, list[str]] = {}
    for name, ip in published:
        by_ip.setdefault(ip, []).append(name)
    shared = {ip: names for ip, names in by_ip.items() if len(names) > 1}
    me = _find(nodes, manifest.node) if manifest is not None else None
    mine = nodes.annotation(me, FLANNEL + "public-ip") if me is not None else None
    held = {str(a.ip) for _, a in _addresses(addresses)}
    # an address behind NAT is published on purpose (public-ip-overwrite, k3s --flannel-external-ip): not foreign
    meant = me is not None and (
        nodes.annotation(me, FLANNEL + "public-ip-overwrite") is not None or mine in _external_ips(me)
    )
    foreign = mine is not None and held and mine not in held and not meant
    if not shared and not foreign:
        return
    if shared:
        ip, names = next(iter(shared.items()))
        summary = (
            f"{len(names)} nodes publish the same flannel public-ip {ip} ({', '.join(names[:4])}): the overlay cannot "
            "tell them apart, so their pods' traffic goes to one of them"
        )
    else:
        summary = (
            f"this node publishes flannel public-ip {mine}, which none of its interfaces holds "
            f"({', '.join(sorted(held)[:3])}): other nodes send its pods' traffic to {mine}"
        )
    yield new(
        summary,
        fix=(
            command(
                "kubectl get nodes -o custom-columns=NAME:.metadata.name,"
                "PUBLIC-IP:'.metadata.annotations.flannel\\.alpha\\.coreos\\.com/public-ip',"
                "INTERNAL-IP:'.status.addresses[?(@.type==\"InternalIP\")].address'"
            ),
            command(
                "kubectl -n kube-flannel edit daemonset kube-flannel-ds   # args: --iface=<the interface of the node "
                "network> (k3s: --flannel-iface on every node; RKE2 Canal: canal_iface in rke2-canal's HelmChartConfig)"
            ),
        ),
        evidence=[Evidence(nodes.source, f"node {n}: {FLANNEL}public-ip {ip}") for n, ip in published[:4]]
        + ([Evidence(addresses.source, f"this node's addresses: {', '.join(sorted(held)[:4])}")] if foreign else []),
        subject=(manifest.node if manifest is not None else "") or "flannel",
        data={"published": dict(published), "shared": shared},
    )


@check(
    "KP633",
    "flannel-vtep-mac-mismatch",
    "flannel.1's MAC differs from the VtepMAC this node published",
    "error",
    symptom="Pods on other nodes cannot reach pods on this node (this node's pods can still send); it started after "
    "flannel.1 was recreated or the node was restored from an image.",
    why="""
        With flannel's VXLAN backend each node publishes the MAC of its flannel.1 device in its Node annotation
        flannel.alpha.coreos.com/backend-data ({"VtepMAC": …}); every other node writes that MAC into its ARP and
        forwarding entries for this node's subnet. When flannel.1 has another MAC (recreated by hand, a cloned image)
        and flannel did not republish it, the other nodes' VXLAN packets carry a destination MAC flannel.1 does not
        accept: traffic towards this node's pods is dropped.
    """,
    fix="Restart flannel on this node (it republishes the VtepMAC), then check the other nodes' entries: "
    "ip neigh show dev flannel.1 / bridge fdb show dev flannel.1.",
    cni=("flannel", "canal"),
)
def flannel_vtep_mac(
    new, cni_model: Cni, addresses: Addresses, nodes: FlannelNodes, manifest: Optional[Manifest] = None
):
    model = cni_model.model
    me = _me(nodes, manifest)
    name = nodes.name(me)
    raw = nodes.annotation(me, FLANNEL + "backend-data")
    if model.shape.encap != "vxlan" and (raw is None or "VtepMAC" not in raw):
        return  # another backend (host-gw, WireGuard): no VXLAN endpoint to publish
    if raw is None:
        raise Skip(f"node {name} has no {FLANNEL}backend-data annotation")
    try:
        doc = json.loads(raw)
    except ValueError:
        raise Skip(f"node {name}'s {FLANNEL}backend-data is not JSON: {raw[:60]!r}") from None
    published = str(doc.get("VtepMAC") or "").lower() if isinstance(doc, dict) else ""
    dev = next((link for link in links(addresses.links) if link.get("ifname") == "flannel.1"), None)
    actual = str((dev or {}).get("address") or "").lower()
    if not published or not actual:
        raise Skip("the published VtepMAC or flannel.1's MAC is not known")
    if published == actual:
        return
    yield new(
        f"flannel.1's MAC is {actual}, but this node published VtepMAC {published}: other nodes address their VXLAN "
        "packets for this node's pods to a MAC flannel.1 does not have, and they are dropped",
        fix=(
            command(
                f"kubectl -n kube-flannel delete pod --field-selector spec.nodeName={name} -l app=flannel"
                "   # flannel republishes the VtepMAC (k3s: restart k3s on the node; Canal: its pod, k8s-app=canal)"
            ),
            command("bridge fdb show dev flannel.1   # on another node: this node's entry must show the new MAC"),
        ),
        evidence=[
            Evidence(nodes.source, f"node {name}: {FLANNEL}backend-data {raw}"),
            Evidence(addresses.source, f"flannel.1: link/ether {actual}"),
        ],
        subject="flannel.1",
        data={"published": published, "actual": actual},
    )


@check(
    "KP634",
    "calico-address-autodetect",
    "Calico uses another address for this node than the Node's InternalIP",
    "warning",
    symptom="Pods on this node cannot reach pods on some or all other nodes; calicoctl node status shows BGP sessions "
    "not Established, or IPIP/VXLAN packets leave by the wrong interface.",
    why="""
        calico-node autodetects the node's address (default: the first interface that has one, "first-found") and
        records it in the Node's projectcalico.org/IPv4Address annotation; other nodes peer with and tunnel to that
        address. On nodes with a Docker bridge, a VPN or a second NIC it often picks the wrong one (docker0's
        172.17.0.1, the same on every node).
    """,
    fix="Pin the detection to the node network: IP_AUTODETECTION_METHOD=kubernetes-internal-ip (or interface=<if>, "
    "can-reach=<ip>) on calico-node (operator: Installation spec.calicoNetwork.nodeAddressAutodetectionV4).",
    cni=("calico",),
)
def calico_address_autodetect(new, addresses: Addresses, nodes: CalicoNodes, manifest: Optional[Manifest] = None):
    me = _me(nodes, manifest)
    name = nodes.name(me)
    raw = nodes.annotation(me, CALICO_ADDR)
    if raw is None:
        raise Skip(f"node {name} has no {CALICO_ADDR} annotation")
    try:
        used = ipaddress.ip_interface(raw.strip()).ip
    except ValueError:
        raise Skip(f"{CALICO_ADDR} {raw!r} is not an address") from None
    internals = [ip for ip in _internal_ips(me) if ipaddress.ip_address(ip).version == used.version]
    if not internals:
        raise Skip(f"node {name} has no IPv{used.version} InternalIP to compare {CALICO_ADDR} with")
    internal = internals[0]
    if str(used) in internals:
        return
    where = next((ifname for ifname, a in _addresses(addresses) if a.ip == used), None)
    shared = [
        nodes.name(o)
        for o in nodes.objects
        if o is not me and (nodes.annotation(o, CALICO_ADDR) or "").split("/")[0] == str(used)
    ]
    if where is not None and not where.startswith(NOT_NODE_NETWORKS) and not shared:
        return  # pinned on purpose (IP_AUTODETECTION_METHOD=interface=…, a second NIC for pod traffic)
    yield new(
        f"Calico uses {used}"
        + (f" (interface {where})" if where else " (an address this node does not hold)")
        + f" for this node, not its InternalIP {internal}: other nodes peer with and tunnel to {used}",
        fix=(
            command(
                "kubectl -n calico-system set env daemonset/calico-node IP_AUTODETECTION_METHOD=kubernetes-internal-ip"
                "   # manifest installs: namespace kube-system"
            ),
            command("calicoctl node status   # BGP sessions Established after the restart"),
        ),
        evidence=[
            Evidence(nodes.source, f"node {name}: {CALICO_ADDR} {raw}, InternalIP {internal}"),
        ]
        + ([Evidence(addresses.source, f"{where}: inet {used}")] if where else []),
        subject=name,
        data={"calico_address": str(used), "internal_ip": internal, "interface": where},
    )


@check(
    "KP635",
    "pod-range-over-node-lan",
    "Pod addresses overlap the network the node itself is on",
    "error",
    symptom="Some hosts of the node's own LAN (a gateway, a database, another node) are unreachable from this node or "
    "its pods, or answer as if they were pods; it depends on which addresses pods took.",
    why="""
        A pod range inside the network the nodes live on (Calico's default pool 192.168.0.0/16 on a 192.168.x LAN, a
        podCIDR handed out from the node subnet) makes the kernel route part of that network to pods: a pod's /32 or
        the pod range's route is more specific than the LAN's, so replies for LAN hosts go to pods, and pods and LAN
        hosts with the same address shadow each other.
    """,
    fix="Move the pod range off the node network: a new IP pool (Calico: create a pool, disable the old, recreate "
    "pods) or a new cluster CIDR; no pod range may overlap a network the nodes reach.",
    cni=("node-podcidr", "ipam-blocks", "ebpf", "antrea"),  # Weave and OVN-Kubernetes keep ranges kpdiag does not read
)
def pod_range_overlaps_node_network(new, cni_model: Cni, addresses: Addresses, route_list: Routes, nodes: NodeObjects):
    model = cni_model.model
    ranges: list[tuple[ipaddress.IPv4Network, Evidence]] = []
    own = model.own_pod_ranges(addresses.links, route_list.routes)
    for cidr, text in own or ():
        ranges.append((ipaddress.ip_network(cidr, strict=False), Evidence(route_list.source, text)))
    if not own:  # the Nodes' podCIDRs are the pods' ranges
        for o in nodes.objects:
            for c in nodes.pod_cidrs(o):
                if ":" not in c and _net(c) is not None:
                    ev = Evidence(nodes.source, f"node {nodes.name(o)}: podCIDR {c}")
                    ranges.append((_net(c), ev))
    if not ranges:
        raise Skip("no pod range known for this node (its CNI's routes, the Nodes' podCIDRs)")
    uplink_devs = {
        str(r.get("dev"))
        for r in route_list.routes
        if isinstance(r, dict) and r.get("dst") == "default" and r.get("dev")
    }
    uplinks = [
        (ifname, a) for ifname, a in _addresses(addresses) if ifname in uplink_devs and 0 < a.network.prefixlen < 32
    ]
    if not uplinks:
        raise Skip("the node network is not known (no default route with an address on its interface)")
    hits = [(i, a, r, ev) for i, a in uplinks for r, ev in ranges if r.overlaps(a.network)]
    if not hits:
        return
    ifname, addr, rng, ev = hits[0]
    yield new(
        f"pod range {rng} overlaps {addr.network}, the network of this node's {ifname} ({addr.ip}): addresses of the "
        f"node network are routed to {model.label}'s pods",
        fix=(
            command(f"ip route get {next(iter(rng.hosts()))}   # a node-network address now routed towards pods"),
            command("kubectl get ippools -o wide   # Calico: the pools; other CNIs: the cluster CIDR"),
        ),
        evidence=[ev, Evidence(addresses.source, f"{ifname}: inet {addr}")],
        subject=ifname,
        data={"pod_range": str(rng), "node_network": str(addr.network), "interface": ifname},
    )


@check(
    "KP636",
    "calico-to-host-drop",
    "Calico drops what pods send to their own node (its endpoint-to-host action)",
    "error",
    cni=("calico",),
    symptom="Pods cannot reach a Service whose endpoint runs with hostNetwork on their own node (an ingress "
    "controller, a node agent), or NodeLocal DNSCache: timeouts from pods on that node only, while other nodes' "
    "pods get through.",
    why="""
        Felix sends everything a pod addresses to its own node through cali-wl-to-host, which ends with the
        DefaultEndpointToHostAction of the FelixConfiguration: Accept by default, Drop or Return where a hardening
        guide set it. With Drop, only what a host endpoint policy allows reaches the node from its pods. kube-proxy
        DNATs a Service to a hostNetwork endpoint on this node to the node's own address, so a pod here connecting to
        that Service is dropped before it gets there (pods on other nodes arrive from outside and are not affected);
        the same holds for NodeLocal DNSCache's address on the node.
    """,
    fix="Set the FelixConfiguration's defaultEndpointToHostAction back to Accept, or allow the ports those "
    "Services use with a host endpoint policy (Calico GlobalNetworkPolicy applyOnForward/preDNAT rules for the "
    "node's host endpoints).",
)
def calico_endpoint_to_host_drop(new, rules: KubeProxyRules, addresses: Addresses):
    chain = rules.ruleset.chain("filter", "cali-wl-to-host")
    if chain is None or not chain.rules:
        raise Skip("Calico's cali-wl-to-host chain is not in the iptables rules (eBPF or nftables dataplane)")
    last = chain.rules[-1]
    if "DefaultEndpointToHostAction" not in last.text or last.target not in ("DROP", "REJECT"):
        return
    mine = {str(a.ip): ifname for ifname, a in _addresses(addresses)}
    hurt = [
        (svc, ep) for svc, port in rules.programmed.items() for ep in port.endpoints if ep.rsplit(":", 1)[0] in mine
    ]
    cache = [(ip, ifname) for ip, ifname in mine.items() if ifname == "nodelocaldns"]
    if not hurt and not cache:
        return  # a deliberate hardening: nothing of the cluster is served on the node's own addresses
    what = [f"{svc} (endpoint {ep}: this node)" for svc, ep in hurt[:3]] + [
        f"NodeLocal DNSCache ({ip})" for ip, _ in cache
    ]
    yield new(
        f"Calico drops what pods send to this node (DefaultEndpointToHostAction Drop), and {', '.join(what)} "
        "is served on the node's own address: pods on this node cannot reach it",
        fix=(
            command(
                "kubectl patch felixconfiguration default --type merge -p "
                '\'{"spec":{"defaultEndpointToHostAction":"Accept"}}\''
            ),
            note("or keep Drop and allow those ports from the pods with a host endpoint policy"),
        ),
        evidence=[Evidence(rules.ruleset.source, last.text, last.lineno)]
        + [Evidence(rules.ruleset.source, f"{svc}: DNAT to {ep}") for svc, ep in hurt[:2]]
        + [
            Evidence(addresses.source, f"{mine[ep.rsplit(':', 1)[0]]}: inet {ep.rsplit(':', 1)[0]}")
            for _, ep in hurt[:1]
        ],
        subject=hurt[0][0] if hurt else "node",
        data={
            "services": [svc for svc, _ in hurt],
            "node_local_dns": [ip for ip, _ in cache],
            **({"service": hurt[0][0].split(":")[0]} if hurt else {}),
        },
    )

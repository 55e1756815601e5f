"""The node's CNI, recognised from what the node shows (interfaces, routes, processes, pinned BPF objects) and, when
the bundle has them, the CNI's DaemonSets — and the routing model that follows from it.

Checks that judge routes, overlays or pod interfaces ask this model first: a verdict on pod-CIDR routes is only
right for a CNI that routes each node's ``spec.podCIDR`` on the node (flannel, kube-router, a bridge with host-gw
routes). Calico routes its own IPAM blocks (a /26 each by default, with a ``blackhole`` route for the blocks this
node owns), Cilium and Calico's eBPF dataplane forward in BPF, cloud CNIs (AWS VPC CNI, Azure CNI, GKE) give pods
VPC addresses the cloud routes, and Antrea and OVN-Kubernetes switch pod traffic in Open vSwitch: none of them is
judged by Node podCIDR routes. An unrecognised CNI gets no route verdicts at all (the model says why, once).

The facts each shape is recognised by (device names, route protocols, the routes each CNI installs) are those the
fixtures of the healthy zoo are built from (fixtures/zoo.py, documented in fixtures/README.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

Links = Iterable[dict[str, Any]] | None  # ip -j addr objects (None: not collected)
Routes = Iterable[Any] | None  # ip -j route objects
Add = Callable[[str, str], None]  # records one sign: (the source it is in, what it shows)

from dataclasses import dataclass, field

# routing models: how pod traffic to another node finds its way
NODE_PODCIDR = "node-podcidr"  # a route per other node's spec.podCIDR on this node (flannel, kube-router)
IPAM_BLOCKS = "ipam-blocks"  # the CNI's own address blocks, not the Nodes' podCIDRs (Calico)
EBPF = "ebpf"  # forwarded in BPF programs; the kernel's routes are not the whole story (Cilium, Calico eBPF)
VPC = "vpc"  # pods have VPC addresses the cloud routes (AWS VPC CNI, Azure CNI, GKE VPC-native)
OVS = "ovs"  # switched in Open vSwitch flows kpdiag does not read (Antrea, OVN-Kubernetes)
WHOLE_RANGE = "whole-range"  # one bridge or route for the whole pod range (Weave)
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Shape:
    """One CNI configuration kpdiag knows: its name, routing model, encapsulation, and its interfaces."""

    cni: str  # "flannel", "calico", "cilium", …
    label: str  # "flannel (VXLAN)"
    routing: str
    encap: str | None = None  # "vxlan", "ipip", "geneve", "wireguard", None: native routing
    overlay_port: int | None = None  # the UDP port the overlay uses between nodes (VXLAN/Geneve/WireGuard)
    pod_prefixes: tuple[str, ...] = ()  # the node ends of pod interfaces
    bridge: str | None = None  # the Linux bridge pods hang off, if any


SHAPES = {
    s.label: s
    for s in (
        Shape("flannel", "flannel (VXLAN)", NODE_PODCIDR, "vxlan", 8472, ("veth",), "cni0"),
        Shape("flannel", "flannel (WireGuard)", NODE_PODCIDR, "wireguard", 51820, ("veth",), "cni0"),
        Shape("flannel", "flannel (host-gw)", NODE_PODCIDR, None, None, ("veth",), "cni0"),
        Shape("flannel", "flannel (backend not seen)", NODE_PODCIDR, None, None, ("veth",), "cni0"),
        Shape("canal", "Canal (flannel VXLAN, Calico policy)", NODE_PODCIDR, "vxlan", 8472, ("cali",)),
        Shape("kube-router", "kube-router", NODE_PODCIDR, None, None, ("veth",), "kube-bridge"),
        Shape("calico", "Calico (VXLAN)", IPAM_BLOCKS, "vxlan", 4789, ("cali",)),
        Shape("calico", "Calico (IPIP)", IPAM_BLOCKS, "ipip", None, ("cali",)),
        Shape("calico", "Calico (WireGuard)", IPAM_BLOCKS, "wireguard", 51820, ("cali",)),
        Shape("calico", "Calico (BGP, no encapsulation)", IPAM_BLOCKS, None, None, ("cali",)),
        Shape("calico", "Calico (eBPF dataplane)", EBPF, None, None, ("cali",)),
        Shape("cilium", "Cilium (VXLAN)", EBPF, "vxlan", 8472, ("lxc",)),
        Shape("cilium", "Cilium (Geneve)", EBPF, "geneve", 6081, ("lxc",)),
        Shape("cilium", "Cilium (native routing)", EBPF, None, None, ("lxc",)),
        Shape("antrea", "Antrea", OVS, "geneve", 6081, ()),
        Shape("ovn-kubernetes", "OVN-Kubernetes", OVS, "geneve", 6081, ()),
        Shape("weave", "Weave Net", WHOLE_RANGE, "vxlan", 6784, ("vethwe",), "weave"),
        Shape("aws-vpc-cni", "AWS VPC CNI", VPC, None, None, ("eni",)),
        Shape("azure-cni", "Azure CNI", VPC, None, None, ("azv",)),
        Shape("gke", "GKE (VPC-native)", VPC, None, None, ("gke",)),
    )
}

# why pod-CIDR route verdicts do not apply, by routing model
NOT_JUDGED = {
    IPAM_BLOCKS: "routes its own IPAM blocks (a /26 each by default, blackhole routes for this node's own blocks), not "
    "the Nodes' podCIDRs",
    EBPF: "forwards pod traffic in BPF programs: the kernel's routes to other nodes' pods are not what carries it",
    VPC: "gives pods VPC addresses that the cloud's routes carry, not routes on the node",
    OVS: "switches pod traffic between nodes in Open vSwitch flows, which kpdiag does not read",
    WHOLE_RANGE: "routes the whole pod range to one bridge, not one route per node",
}

# CNIs whose configuration chains the portmap plugin for hostPort (their own Calico eBPF variant aside)
PORTMAP_HOSTPORT = frozenset(("flannel", "canal", "calico", "kube-router", "weave", "aws-vpc-cni", "azure-cni", "gke"))
# why hostPort is not portmap's, by CNI
HOSTPORT_OWN = {
    "cilium": "implements hostPort in its BPF programs (portmap rules are not what carries it)",
    "antrea": "implements hostPort itself, not through the portmap plugin",
    "ovn-kubernetes": "implements hostPort itself, not through the portmap plugin",
    "ebpf": "implements hostPort in its BPF programs (portmap rules are not what carries it)",
}

# process name → CNI label (node/processes.txt)
PROCESSES = {
    "flanneld": "flannel",
    "calico-node": "calico",
    "calico-felix": "calico",
    "bird": "calico",
    "cilium-agent": "cilium",
    "kube-router": "kube-router",
    "antrea-agent": "antrea",
    "ovnkube": "ovn-kubernetes",
    "ovn-controller": "ovn-kubernetes",
    "aws-k8s-agent": "aws-vpc-cni",
}

# DaemonSet (or its pods' name) → CNI, as the API shows them (cluster/cni.json, cluster/daemonsets.json)
DAEMONSETS = (
    ("calico-node", "calico"),
    ("canal", "canal"),
    ("rke2-canal", "canal"),
    ("cilium", "cilium"),
    ("antrea-agent", "antrea"),
    ("ovnkube-node", "ovn-kubernetes"),
    ("kube-router", "kube-router"),
    ("kube-flannel-ds", "flannel"),
    ("kube-flannel", "flannel"),
    ("aws-node", "aws-vpc-cni"),
    ("azure-cns", "azure-cni"),
    ("weave-net", "weave"),
)


@dataclass(frozen=True)
class CniModel:
    """What kpdiag recognised: the shape (None: unknown), each sign as (source, text), and what it could not read."""

    shape: Shape | None
    signs: tuple[tuple[str, str], ...] = ()
    unread: tuple[str, ...] = ()  # sources that would have told more but were not there
    others: tuple[str, ...] = field(default=())  # other CNIs' signs seen (leftovers, chained plugins)
    from_node: bool = False  # the shape was told by the node's own interfaces, routes or BPF objects, not by a name
    settings: tuple[tuple[str, str, str], ...] = ()  # (component, variable, value) of the CNI's env kpdiag keeps
    settings_source: str = ""  # the file they were read from (cluster/cni.json, cluster/daemonsets.json)

    def unencapsulated(self) -> bool:
        """Pods' packets cross to other nodes with their own addresses, unencapsulated (flannel host-gw, Calico BGP
        without IPIP/VXLAN, kube-router) — as the node itself shows it, not guessed from a DaemonSet's name."""
        s = self.shape
        return bool(
            s is not None
            and self.from_node
            and s.encap is None
            and s.routing in (NODE_PODCIDR, IPAM_BLOCKS)
            and s.label != "flannel (backend not seen)"
        )

    @property
    def name(self) -> str | None:
        return self.shape.cni if self.shape else None

    @property
    def label(self) -> str:
        return self.shape.label if self.shape else "unknown"

    @property
    def routing(self) -> str:
        return self.shape.routing if self.shape else UNKNOWN

    def route_verdicts(self) -> str | None:
        """None when pod-CIDR route verdicts apply to this node; else the one-line reason they do not."""
        if self.shape is None:
            seen = "; ".join(t for _, t in self.signs[:2]) or "no CNI interface, route protocol, process or DaemonSet"
            return f"the node's CNI is not recognised ({seen}): kpdiag gives no route verdicts it cannot ground"
        if self.shape.routing == NODE_PODCIDR:
            return None
        return f"{self.shape.label} {NOT_JUDGED[self.shape.routing]}"

    def own_pod_ranges(self, links: Links, routes: Routes) -> list[tuple[str, str]] | None:
        """This node's pod ranges where the CNI's own IPAM hands them out rather than the Node's ``spec.podCIDR``, as
        (CIDR, the route that shows it): Calico's blocks (the ``blackhole`` routes it keeps for the blocks this node
        owns), Cilium's allocation range (the route to it via ``cilium_host``), the VPC addresses of the AWS VPC CNI's
        and Azure CNI's pods (a host route each). None where the Nodes' podCIDRs are the pods' ranges (flannel,
        kube-router, GKE's alias ranges …) or the CNI is not known."""
        if self.shape is None or self.shape.cni not in ("calico", "cilium", "aws-vpc-cni", "azure-cni"):
            return None
        import ipaddress

        host = [
            ipaddress.ip_address(a["local"])
            for link in links or ()
            if link.get("ifname") == "cilium_host"
            for a in link.get("addr_info") or ()
            if isinstance(a, dict) and isinstance(a.get("local"), str)
        ]
        out = []
        for r in routes or ():
            dst = r.get("dst") if isinstance(r, dict) else None
            if not isinstance(dst, str) or dst == "default":
                continue
            if self.shape.cni in ("aws-vpc-cni", "azure-cni"):  # each pod: a host route to its VPC address
                dev = str(r.get("dev") or "")
                if "/" not in dst and r.get("table", "main") == "main" and dev.startswith(self.shape.pod_prefixes):
                    out.append((f"{dst}/{128 if ':' in dst else 32}", f"{dst} dev {dev}"))
                continue
            if "/" not in dst:
                continue
            if self.shape.cni == "calico" and r.get("type") == "blackhole":
                out.append((dst, f"blackhole {dst}" + (f" proto {r['protocol']}" if r.get("protocol") else "")))
            elif self.shape.cni == "cilium" and r.get("dev") == "cilium_host":
                net = ipaddress.ip_network(dst, strict=False)
                if any(h.version == net.version and h in net for h in host):
                    out.append((dst, f"{dst} via {r.get('gateway')} dev cilium_host"))
        return out

    def hostport_not_portmap(self) -> str | None:
        """None where hostPort is the CNI portmap plugin's (its DNAT rules in iptables CNI-HOSTPORT-DNAT / CNI-DN-*
        chains, or its nftables table cni_hostport, and its UDP conntrack cleanup); else the one-line reason it is not
        (the CNI does hostPort itself, or the CNI is not recognised)."""
        if self.shape is None:
            return "the node's CNI is not recognised: whether the portmap plugin implements hostPort here is not known"
        if self.shape.cni in PORTMAP_HOSTPORT and self.shape.routing != EBPF:
            return None
        return f"{self.shape.label} {HOSTPORT_OWN.get(self.shape.cni, HOSTPORT_OWN['ebpf'])}"

    def judged_by(self, wanted: tuple[str, ...] | list[str]) -> bool:
        """Whether a check about ``wanted`` (CNI names or routing models) judges this node."""
        return self.shape is not None and (self.shape.cni in wanted or self.shape.routing in wanted)

    def not_about(self, wanted: tuple[str, ...] | list[str]) -> str | None:
        """None when a check about ``wanted`` applies here; else the one-line reason it does not."""
        if self.judged_by(wanted):
            return None
        about = ", ".join(wanted)
        if self.shape is None:
            seen = "; ".join(t for _, t in self.signs[:2]) or "no CNI interface, route protocol, process or DaemonSet"
            return f"about {about}; the node's CNI is not recognised ({seen}), so kpdiag does not judge it"
        return f"about {about}; this node's CNI is {self.label}"

    def summary(self) -> str:
        why = ", ".join(t for _, t in self.signs[:3])
        return f"CNI: {self.label}" + (f" ({why})" if why else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "cni": self.name,
            "shape": self.label,
            "routing": self.routing,
            "encap": self.shape.encap if self.shape else None,
            "signs": [{"source": s, "text": t} for s, t in self.signs],
            "others": list(self.others),
        }


def known_cnis() -> set[str]:
    """The names a check may declare in ``cni=``: every CNI and every routing model kpdiag knows."""
    return {s.cni for s in SHAPES.values()} | {s.routing for s in SHAPES.values()}


def _kind(link: dict[str, Any]) -> str | None:
    info = link.get("linkinfo")
    kind = info.get("info_kind") if isinstance(info, dict) else None
    return kind if isinstance(kind, str) else None


def _names(links: Links) -> dict[str, dict[str, Any]]:
    return {link["ifname"]: link for link in links or () if isinstance(link.get("ifname"), str)}


def _route_signs(routes: Routes) -> dict[str, str]:
    """What the routes show: ``bird`` (Calico's BGP daemon), ``felix`` (protocol 80: Calico's own routes), a route
    via ``tunl0``, ``vxlan.calico`` …; value: the route as text (evidence)."""
    out: dict[str, str] = {}
    for r in routes or ():
        if not isinstance(r, dict):
            continue
        proto, dev, dst = str(r.get("protocol") or ""), str(r.get("dev") or ""), str(r.get("dst") or "")
        text = " ".join(
            x
            for x in (
                r.get("type") if r.get("type") != "unicast" else "",
                dst,
                f"dev {dev}" if dev else "",
                f"proto {proto}" if proto else "",
            )
            if x
        )
        if proto == "bird":
            out.setdefault("bird", text)
        elif proto in ("80", "felix"):
            out.setdefault("felix", text)
        if dev == "tunl0" and dst != "default":
            out.setdefault("tunl0", text)
    return out


def _routed(routes: Routes) -> set[str]:
    """The devices main-table routes lead to other networks through (a device that carries no route carries no
    traffic of its own: a leftover of an uninstalled CNI)."""
    out = set()
    for r in routes or ():
        if isinstance(r, dict) and r.get("dst") not in (None, "default") and r.get("table", "main") == "main":
            if r.get("dev") and r.get("type", "unicast") == "unicast":
                out.add(str(r["dev"]))
    return out


def _calico_routing(names: dict[str, Any], rsigns: dict[str, Any]) -> bool:
    """Calico's own routing is on the node: its VXLAN device, routes via tunl0, BIRD's or Felix's routes, eBPF."""
    return bool(
        "vxlan.calico" in names
        or "tunl0" in rsigns
        or "bird" in rsigns
        or "felix" in rsigns
        or "bpfnatin" in names
        or "bpfnatout" in names
    )


def _calico(names: dict[str, Any], rsigns: dict[str, Any], add: Add) -> Shape | None:
    cali = sorted(n for n in names if n.startswith("cali"))
    ebpf = "bpfnatin" in names or "bpfnatout" in names
    if not (_calico_routing(names, rsigns) or (cali and "cni0" not in names)):
        return None  # a stray cali* beside a bridge CNI is not Calico's data path
    if ebpf:
        add("addr", "interfaces bpfnatin/bpfnatout (Calico's eBPF dataplane)")
        return SHAPES["Calico (eBPF dataplane)"]
    if "wireguard.cali" in names:
        add("addr", "interface wireguard.cali")
        return SHAPES["Calico (WireGuard)"]
    if "vxlan.calico" in names or "vxlan-v6.calico" in names:
        add("addr", "interface vxlan.calico")
        return SHAPES["Calico (VXLAN)"]
    if "tunl0" in rsigns:
        add("route", f"route {rsigns['tunl0']}")
        return SHAPES["Calico (IPIP)"]
    if "bird" in rsigns:
        add("route", f"route {rsigns['bird']}")
        return SHAPES["Calico (BGP, no encapsulation)"]
    if cali:
        add("addr", f"pod interfaces {', '.join(cali[:2])}")
        if "felix" in rsigns:
            add("route", f"route {rsigns['felix']}")
        return SHAPES["Calico (BGP, no encapsulation)"]
    return None


def _cilium(names: dict[str, Any], routed: set[str], add: Add) -> Shape | None:
    """Cilium, when its devices carry traffic: its tunnel device, lxc* pods, or routes via cilium_host (a leftover
    cilium_host/cilium_net pair of an uninstalled Cilium routes nothing)."""
    if not any(n.startswith("cilium_") for n in names):
        return None
    pods = any(n.startswith("lxc") for n in names)
    tunnel = next((n for n in ("cilium_vxlan", "cilium_geneve") if n in names), None)
    if not (tunnel or pods or "cilium_host" in routed):
        return None
    add("addr", "interface cilium_host" if "cilium_host" in names else "cilium_* interfaces")
    if tunnel == "cilium_vxlan":
        return SHAPES["Cilium (VXLAN)"]
    if tunnel == "cilium_geneve":
        return SHAPES["Cilium (Geneve)"]
    return SHAPES["Cilium (native routing)"]


def _flannel(names: dict[str, Any], rsigns: dict[str, Any], routed: set[str], add: Add) -> Shape | None:
    """flannel's devices — unless flannel.1 routes nothing while Calico's own routing is there (flannel's leftover
    on a node moved to Calico). Canal: flannel.1 with Calico's cali* pods and no bridge of flannel's."""
    for dev, label in (("flannel.1", "flannel (VXLAN)"), ("flannel-wg", "flannel (WireGuard)")):
        if dev not in names or (dev not in routed and _calico_routing(names, rsigns)):
            continue
        if dev == "flannel.1" and "cni0" not in names and any(n.startswith("cali") for n in names):
            add("addr", "interfaces flannel.1 and cali* (Canal)")
            return SHAPES["Canal (flannel VXLAN, Calico policy)"]
        add("addr", f"interface {dev}")
        return SHAPES[label]
    return None


def _by_interfaces(
    names: dict[str, Any], rsigns: dict[str, Any], add: Add, routed: set[str] | None = None
) -> Shape | None:
    """The shape the node's own interfaces and routes show (the strongest signs: they are the data path)."""
    routed = routed or set()
    shape = _cilium(names, routed, add) or _flannel(names, rsigns, routed, add)
    if shape is not None:
        return shape
    calico = _calico(names, rsigns, add)
    if calico:
        return calico
    for dev, label in (
        ("kube-bridge", "kube-router"),
        ("antrea-gw0", "Antrea"),
        ("ovn-k8s-mp0", "OVN-Kubernetes"),
        ("weave", "Weave Net"),
    ):
        if dev in names:
            add("addr", f"interface {dev}")
            return SHAPES[label]
    for prefix, label in (("eni", "AWS VPC CNI"), ("azv", "Azure CNI"), ("gke", "GKE (VPC-native)")):
        pods = sorted(n for n in names if n.startswith(prefix) and _kind(names[n]) in (None, "veth"))
        if pods:
            add("addr", f"pod interfaces {', '.join(pods[:2])}")
            return SHAPES[label]
    return None


def _by_name(cni: str, names: dict[str, Any], host_gw: bool = False) -> Shape | None:
    """The shape of a CNI known by its process or DaemonSet, when its interfaces did not say which variant."""
    if cni == "flannel":  # known by its agent or DaemonSet, no flannel.1: host-gw if its routes say so, else unseen
        return SHAPES["flannel (host-gw)"] if host_gw else SHAPES["flannel (backend not seen)"]
    if cni == "calico":
        return SHAPES["Calico (BGP, no encapsulation)"]
    return next((s for s in SHAPES.values() if s.cni == cni), None)


def _host_gw_routes(routes: Routes, names: dict[str, Any]) -> bool:
    """Routes to other pod ranges via a gateway on the bridge's peer network (flannel host-gw's 'SUBNET via NODE'):
    a unicast route with a gateway whose prefix is a /16–/28 and that is not the default route."""
    if "cni0" not in names:
        return False
    return any(
        isinstance(r, dict)
        and r.get("gateway")
        and r.get("dst") not in (None, "default")
        and "/" in str(r.get("dst"))
        and r.get("dev") not in ("cni0", "flannel.1")
        for r in routes or ()
    )


def _component_cnis(components: Iterable[Any] | None) -> list[tuple[str, str]]:
    out = []
    for comp in components or ():
        if not isinstance(comp, dict):
            continue
        name = str(comp.get("owner") or comp.get("name") or "")
        for prefix, cni in DAEMONSETS:
            if (
                name == prefix
                or name.startswith(prefix + "-")
                and not name.startswith(("cilium-operator", "cilium-envoy"))
            ):
                out.append((cni, f"{comp.get('kind') or 'DaemonSet'} {comp.get('namespace') or '?'}/{name}"))
                break
    return out


def _flannel_notes(notes: Iterable[tuple[str, Any]] | None) -> list[str]:
    """flannel's record in the Nodes (its annotations: backend-type …), a sign where flannel runs inside another
    binary (k3s) with no process or DaemonSet of its own."""
    for name, note in notes or ():
        backend = note.get("flannel.alpha.coreos.com/backend-type") if isinstance(note, dict) else None
        if isinstance(backend, str):
            return [f"node {name}: flannel.alpha.coreos.com/backend-type {backend}"]
    return []


def recognise(
    links: Links,
    routes: Routes,
    processes: dict[str, str] | None = None,
    bpf_maps: list[str] | None = None,
    components: list[dict[str, Any]] | None = None,
    sources: dict[str, Any] | None = None,
    notes: list[tuple[str, dict[str, Any]]] | None = None,
) -> CniModel:
    """The CNI model of a node. ``links``/``routes``: ``ip -j addr``/``ip -j route`` objects (None: not collected);
    ``processes``: name → pid; ``bpf_maps``: pinned object names; ``components``: the CNI DaemonSets/pods as
    cluster/cni.json lists them; ``sources``: how evidence names each ("addr", "route", "processes", "bpf", "api")."""
    src = {
        "addr": "ip-addr",
        "route": "ip-route",
        "processes": "processes",
        "bpf": "bpf-maps",
        "api": "cni",
        "nodes": "nodes",
    }
    src.update(sources or {})
    signs: list[tuple[str, str]] = []

    def add(kind: str, text: str) -> None:
        signs.append((src[kind], text))

    unread = tuple(src[k] for k, v in (("addr", links), ("route", routes)) if v is None)
    names = _names(links)
    shape = _by_interfaces(names, _route_signs(routes), add, _routed(routes))
    from_node = shape is not None
    maps = set(bpf_maps or ())
    if shape is None and any(m.startswith("cali_") for m in maps):
        add("bpf", "pinned BPF maps cali_*")
        shape = SHAPES["Calico (eBPF dataplane)"]
    if shape is None and any(m.startswith("cilium_") for m in maps):
        add("bpf", "pinned BPF maps cilium_*")
        shape = SHAPES["Cilium (native routing)"]
    from_node = from_node or shape is not None
    named = [
        (cni, f"process {p} (pid {pid})", "processes")
        for p, pid in (processes or {}).items()
        if (cni := PROCESSES.get(p))
    ]
    named += [(cni, text, "api") for cni, text in _component_cnis(components)]
    named += [("flannel", text, "nodes") for text in _flannel_notes(notes)]
    if shape is None:
        gw = _host_gw_routes(routes, names)
        for cni, text, kind in named:
            shape = _by_name(cni, names, gw)
            if shape is not None:
                add(kind, text)
                from_node = shape.label == "flannel (host-gw)"  # told by its routes on the node
                break
    return CniModel(shape, tuple(signs), unread, _others(shape, named), from_node, _settings(components), src["api"])


def _settings(components: Iterable[Any] | None) -> tuple[tuple[str, str, str], ...]:
    """(component, variable, value) of the env the CNI components kept (kpdiag.state.netpol.component)."""
    out = []
    for comp in components or ():
        for c in comp.get("containers") or [] if isinstance(comp, dict) else ():
            env = c.get("env") if isinstance(c, dict) else None
            for k, v in sorted(env.items()) if isinstance(env, dict) else ():
                if isinstance(k, str) and isinstance(v, str):
                    out.append(
                        (f"{comp.get('kind') or 'DaemonSet'} {comp.get('namespace') or '?'}/{comp.get('name')}", k, v)
                    )
    return tuple(out)


def _others(shape: Shape | None, named: list[Any]) -> tuple[str, ...]:
    """Other CNIs named by a process or DaemonSet than the one recognised (a leftover, a chained plugin)."""
    if shape is None:
        return ()
    mine = {shape.cni} | ({"flannel", "calico"} if shape.cni == "canal" else set())
    return tuple(sorted({cni for cni, _, _ in named} - mine))

"""kpdiag/state/cni.py: the CNI model from what a node shows, and which route verdicts follow from it."""

from __future__ import annotations

from kpdiag.state.cni import recognise


def link(name: str, kind: str | None = None, addrs=()) -> dict:
    out = {"ifname": name, "addr_info": [{"local": a} for a in addrs]}
    if kind:
        out["linkinfo"] = {"info_kind": kind}
    return out


def test_unknown_cni_gets_no_route_verdicts_and_says_why_in_one_line():
    model = recognise([link("lo"), link("eth0", "veth"), link("docker0", "bridge")], [])
    assert model.shape is None and model.label == "unknown"
    why = model.route_verdicts()
    assert why and "not recognised" in why and "\n" not in why


def test_flannel_and_kube_router_are_judged_calico_cilium_cloud_ovs_are_not():
    judged = recognise([link("flannel.1", "vxlan"), link("cni0", "bridge")], [])
    assert judged.label == "flannel (VXLAN)" and judged.route_verdicts() is None
    assert recognise([link("kube-bridge", "bridge")], []).route_verdicts() is None
    for links, routes, label in (
        ([link("cali12345")], [{"dst": "10.1.2.0/26", "type": "blackhole", "protocol": "bird"}], "Calico (BGP"),
        ([link("tunl0", "ipip")], [{"dst": "10.1.3.0/26", "dev": "tunl0", "protocol": "bird"}], "Calico (IPIP)"),
        ([link("vxlan.calico", "vxlan")], [], "Calico (VXLAN)"),
        ([link("cilium_host", "veth"), link("cilium_vxlan", "vxlan")], [], "Cilium (VXLAN)"),
        ([link("eni1a2b3c4d5e6", "veth")], [], "AWS VPC CNI"),
        ([link("antrea-gw0")], [], "Antrea"),
        ([link("ovn-k8s-mp0")], [], "OVN-Kubernetes"),
    ):
        model = recognise(links, routes)
        assert model.label.startswith(label), (label, model.label)
        assert model.route_verdicts() and model.label in model.route_verdicts()


def test_canal_is_flannel_routing_with_calico_interfaces():
    model = recognise(
        [link("flannel.1", "vxlan"), link("cali0a1b2c3d4e5")], [], {"flanneld": "10", "calico-node": "11"}
    )
    assert model.name == "canal" and model.route_verdicts() is None and model.others == ()


def test_process_or_daemonset_names_the_cni_when_the_interfaces_do_not():
    assert recognise([link("cni0", "bridge")], [], {"flanneld": "42"}).label == "flannel (backend not seen)"
    host_gw = [{"dst": "10.244.2.0/24", "gateway": "192.168.1.12", "dev": "eth0"}]
    assert recognise([link("cni0", "bridge")], host_gw, {"flanneld": "42"}).label == "flannel (host-gw)"
    comps = [{"kind": "DaemonSet", "namespace": "kube-system", "name": "kube-router", "containers": []}]
    model = recognise([link("eth0")], [], components=comps, sources={"api": "cluster/cni.json"})
    assert model.label == "kube-router" and model.signs[0][0] == "cluster/cni.json"
    # the operator of a CNI is not the CNI
    comps = [{"kind": "DaemonSet", "namespace": "kube-system", "name": "cilium-operator", "containers": []}]
    assert recognise([link("eth0")], [], components=comps).shape is None


def test_a_leftover_of_another_cni_is_named():
    model = recognise([link("flannel.1", "vxlan"), link("cni0", "bridge")], [], {"calico-node": "7"})
    assert model.label == "flannel (VXLAN)" and model.others == ("calico",)


def test_own_pod_ranges_come_from_the_cnis_routes():
    routes = [
        {"dst": "10.9.8.64/26", "type": "blackhole", "protocol": "bird"},
        {"dst": "10.9.1.0/26", "gateway": "192.168.1.2", "dev": "eth0", "protocol": "bird"},
    ]
    calico = recognise([link("cali0a1b2c3d4e5")], routes)
    assert calico.label.startswith("Calico")
    assert [c for c, _ in calico.own_pod_ranges([], routes)] == ["10.9.8.64/26"]
    routes = [
        {"dst": "10.0.1.0/24", "gateway": "10.0.1.200", "dev": "cilium_host"},
        {"dst": "10.0.2.0/24", "gateway": "10.0.1.200", "dev": "cilium_host"},
    ]
    cilium = recognise([link("cilium_host", "veth", ["10.0.1.200"])], routes)
    assert [c for c, _ in cilium.own_pod_ranges([link("cilium_host", "veth", ["10.0.1.200"])], routes)] == [
        "10.0.1.0/24"
    ]
    aws = recognise([link("eni0a1b2c3d4e5", "veth")], [])
    assert [c for c, _ in aws.own_pod_ranges([], [{"dst": "192.168.5.7", "dev": "eni0a1b2c3d4e5"}])] == [
        "192.168.5.7/32"
    ]
    flannel = recognise([link("flannel.1", "vxlan")], [])
    assert flannel.own_pod_ranges([], routes) is None  # the Nodes' podCIDRs are flannel's ranges


def test_leftovers_of_an_uninstalled_cni_do_not_decide():
    """flannel.1 routing nothing beside Calico's own routes is flannel's leftover (Calico, flannel named in others);
    cilium_host/cilium_net routing nothing beside flannel's routes is Cilium's; a stray cali* beside cni0 is not
    Calico or Canal."""
    calico_routes = [{"dst": "10.1.3.0/26", "dev": "tunl0", "gateway": "192.168.1.3", "protocol": "bird"}]
    model = recognise([link("flannel.1", "vxlan"), link("tunl0", "ipip"), link("cali0a1b2c3d4e5")], calico_routes)
    assert model.label == "Calico (IPIP)"
    flannel_routes = [{"dst": "10.244.2.0/24", "gateway": "10.244.2.0", "dev": "flannel.1"}]
    model = recognise([link("flannel.1", "vxlan"), link("cni0", "bridge"), link("cilium_host", "veth")], flannel_routes)
    assert model.label == "flannel (VXLAN)"
    model = recognise([link("cni0", "bridge"), link("cali0a1b2c3d4e5")], [], {"flanneld": "9"})
    assert model.name == "flannel"
    model = recognise([link("flannel.1", "vxlan"), link("cni0", "bridge"), link("cali0a1b2c3d4e5")], flannel_routes)
    assert model.label == "flannel (VXLAN)"


def test_flannel_inside_k3s_is_known_by_its_node_annotations():
    notes = [("node-a", {"flannel.alpha.coreos.com/backend-type": "host-gw"})]
    hostgw = [{"dst": "10.42.1.0/24", "gateway": "192.168.1.12", "dev": "eth0"}]
    model = recognise(
        [link("cni0", "bridge"), link("eth0")], hostgw, notes=notes, sources={"nodes": "cluster/nodes.json"}
    )
    assert model.label == "flannel (host-gw)" and model.signs[0][0] == "cluster/nodes.json"
    comps = [{"kind": "DaemonSet", "namespace": "kube-system", "name": "rke2-canal", "containers": []}]
    assert recognise([link("eth0")], [], components=comps).name == "canal"

"""IPVS mode's focused read (kpdiag/collect/ipvs_rules.py) off the IPVS kernel: the requests and answers against
pyroute2's own encoding of the kernel's layout, which (protocol, address, port) a Service's packets can meet, the API's
Service read for it (a loopback API server), and the whole read, said why, where it cannot focus. The kernel's answers
themselves are judged in tests/ipvsvm (Debian's kernel with IPVS: test_focused_read_equals_the_whole_dump)."""

from __future__ import annotations

import json
import os
import socket
import struct
import sys

import pytest
from pyroute2.netlink.generic.ipvs import IPVS_CMD_GET_DEST, IPVS_CMD_GET_SERVICE, ipvsmsg

from kpdiag.bundle import sources
from kpdiag.collect import ipvs as ipvsnl
from kpdiag.collect import ipvs_rules as R
from tests import k8sobjects as k8s


def _wire(cmd: int, attr: str, attrs: list) -> bytes:
    """A message as the kernel sends it (pyroute2 encodes the same layout)."""
    msg = ipvsmsg()
    msg["cmd"], msg["version"] = cmd, 1
    msg["attrs"] = [(attr, {"attrs": attrs})]
    msg.encode()
    return bytes(msg.data)


def _decoded(data: bytes):
    back = ipvsmsg(data)
    back.decode()
    return back


@pytest.mark.parametrize(
    "addr,port,proto,af,flags,timeout",
    [
        ("10.96.0.20", 80, socket.IPPROTO_TCP, socket.AF_INET, 0, 0),
        ("10.96.0.10", 53, socket.IPPROTO_UDP, socket.AF_INET, 1, 10800),  # persistent (sessionAffinity ClientIP)
        ("fd00:10:96::a", 8443, 132, socket.AF_INET6, 0, 0),
    ],
)
def test_service_and_dest_answers_read_as_the_whole_dump_reads_them(addr, port, proto, af, flags, timeout):
    svc_attrs = [
        ("IPVS_SVC_ATTR_AF", af),
        ("IPVS_SVC_ATTR_PROTOCOL", proto),
        ("IPVS_SVC_ATTR_ADDR", addr),
        ("IPVS_SVC_ATTR_PORT", port),
        ("IPVS_SVC_ATTR_SCHED_NAME", "wrr"),
        ("IPVS_SVC_ATTR_FLAGS", {"flags": flags, "mask": 0xFFFFFFFF}),
        ("IPVS_SVC_ATTR_TIMEOUT", timeout),
    ]
    if af == socket.AF_INET:
        svc_attrs.append(("IPVS_SVC_ATTR_NETMASK", "255.255.255.255"))
    data = _wire(IPVS_CMD_GET_SERVICE, "IPVS_CMD_ATTR_SERVICE", svc_attrs)
    ours = R._service(R._attrs(R._attrs(data[20:])[R.IPVS_CMD_ATTR_SERVICE]))
    theirs = ipvsnl.service_from_nla(_decoded(data).get_attr("IPVS_CMD_ATTR_SERVICE"))
    assert ours == theirs and ours.addr == addr and ours.port == port
    real = "fd00:10:244::7" if af == socket.AF_INET6 else "10.244.1.7"
    data = _wire(
        IPVS_CMD_GET_DEST,
        "IPVS_CMD_ATTR_DEST",
        [
            ("IPVS_DEST_ATTR_ADDR_FAMILY", af),
            ("IPVS_DEST_ATTR_ADDR", real),
            ("IPVS_DEST_ATTR_PORT", 8080),
            ("IPVS_DEST_ATTR_FWD_METHOD", 0),
            ("IPVS_DEST_ATTR_WEIGHT", 3),
            ("IPVS_DEST_ATTR_ACTIVE_CONNS", 5),
            ("IPVS_DEST_ATTR_INACT_CONNS", 2),
        ],
    )
    ours = R._dest(R._attrs(R._attrs(data[20:])[R.IPVS_CMD_ATTR_DEST]), af)
    theirs = ipvsnl.dest_from_nla(_decoded(data).get_attr("IPVS_CMD_ATTR_DEST"))
    assert ours == theirs and (ours.addr, ours.port, ours.weight, ours.active) == (real, 8080, 3, 5)


@pytest.mark.parametrize("proto,addr,port", [("tcp", "10.96.0.20", 80), ("sctp", "fd00:10:96::a", 3868)])
def test_the_request_names_one_virtual_server(proto, addr, port):
    """IPVS_CMD_GET_SERVICE's key as pyroute2 (and so the kernel's layout) reads it back."""
    body = R._service_key(proto, addr, port)
    head = bytes([IPVS_CMD_GET_SERVICE, 1, 0, 0])
    msg = _decoded(struct.pack("=IHHII", 20 + len(body), 0, 1, 1, 0) + head + body)
    svc = msg.get_attr("IPVS_CMD_ATTR_SERVICE")
    assert svc.get_attr("IPVS_SVC_ATTR_ADDR") == addr
    assert svc.get_attr("IPVS_SVC_ATTR_PORT") == port
    assert svc.get_attr("IPVS_SVC_ATTR_PROTOCOL") == R.PROTO_NUMBERS[proto]
    assert svc.get_attr("IPVS_SVC_ATTR_AF") == (socket.AF_INET6 if ":" in addr else socket.AF_INET)


ADDRS = ["192.168.50.1", "10.244.1.1", "127.0.0.1", "10.96.0.20", "fd00::1", "fe80::1"]


def test_service_keys_are_every_address_and_port_its_packets_meet():
    svc = k8s.service(
        "shop",
        "web",
        "10.96.0.20",
        [k8s.port(80, 8080, "http", node_port=30080), k8s.port(53, 53, "dns", "UDP")],
        type_="LoadBalancer",
        externalIPs=["198.51.100.7"],
    )
    svc["status"] = {"loadBalancer": {"ingress": [{"ip": "192.168.50.200"}, {"hostname": "lb.example"}]}}
    keys = R.service_keys(svc, ADDRS)
    want = {("tcp", ip, 80) for ip in ("10.96.0.20", "198.51.100.7", "192.168.50.200")}
    want |= {("udp", ip, 53) for ip in ("10.96.0.20", "198.51.100.7", "192.168.50.200")}
    want |= {("tcp", a, 30080) for a in ADDRS if ":" not in a}  # an IPv4 Service: NodePorts on IPv4 addresses
    want |= {(p, a, 0) for p, a, _ in want}  # the catch-all (port 0) at each: the kernel's lookup when none there
    assert set(keys) == want and len(keys) == len(want)


@pytest.mark.parametrize(
    "svc,addrs,why",
    [
        (k8s.service("a", "b", "None", [k8s.port(80)]), ADDRS, "headless"),
        (
            {"metadata": {"namespace": "a", "name": "b"}, "spec": {"type": "ExternalName", "externalName": "x.y"}},
            ADDRS,
            "ExternalName",
        ),
        (k8s.service("a", "b", "10.96.0.9", [k8s.port(80, node_port=30001)], type_="NodePort"), None, "NodePorts"),
    ],
)
def test_not_focused_when_the_addresses_cannot_be_told(svc, addrs, why):
    with pytest.raises(R.NotFocused, match=why):
        R.service_keys(svc, addrs)


def test_node_addresses_from_ip_addr():
    links = [
        {"ifname": "lo", "addr_info": [{"local": "127.0.0.1"}, {"local": "::1"}]},
        {"ifname": "kube-ipvs0", "addr_info": [{"local": "10.96.0.20"}]},
        {"ifname": "odd", "addr_info": [{"local": "not-an-ip"}, {}]},
    ]
    assert R.node_addresses(json.dumps(links)) == ["127.0.0.1", "::1"]  # not the Service addresses kube-proxy bound
    assert R.node_addresses(None) is None and R.node_addresses("{") is None


def test_no_ipvs_on_this_kernel_is_not_focused():
    """This kernel has no ip_vs: the generic netlink family is not there, said in one line (the whole read follows)."""
    with pytest.raises(R.NotFocused, match="no IPVS generic netlink family"):
        R.get_services([("tcp", "10.96.0.20", 80)])


_OPENED: list[str] = []  # files opened while a test listens (an audit hook cannot be removed: it checks a flag)
_LISTEN: list[bool] = []


def _audit(event, args):
    if _LISTEN and event == "open" and isinstance(args[0], str):
        _OPENED.append(args[0])


sys.addaudithook(_audit)


@pytest.mark.parametrize("first", ["lookup", "view"])
def test_the_api_service_is_read_once_for_the_rules_and_the_api_view(tmp_path, monkeypatch, first):
    """``kpdiag node --service`` in IPVS mode: the focused rules read needs the API's Service (lookup) while the
    Service's API view is read ahead in another thread — one credential load (the kubeconfig opened once) and one
    GET of the Service between them, whichever asks first."""
    from kpdiag.collect.cluster import ClusterCollector
    from kpdiag.commands.pipeline import _api_ahead
    from tests.apiserver import ApiServer

    monkeypatch.delenv("NODE_NAME", raising=False)
    web = k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")])
    get_web = ("GET", "/api/v1/namespaces/shop/services/web")
    with ApiServer([web, k8s.node(socket.gethostname())]) as api:
        kc = api.kubeconfig(tmp_path)
        mine = lambda: [f for f in _OPENED if os.path.realpath(f) == os.path.realpath(kc)]  # noqa: E731
        _OPENED.clear()
        _LISTEN.append(True)
        try:
            assert ClusterCollector(kc).connect()  # what one credential load opens
        finally:
            _LISTEN.clear()
        one_load = mine()
        assert one_load
        _OPENED.clear()
        _LISTEN.append(True)
        try:
            ahead = _api_ahead("shop/web", kc, None, None)
            if first == "view":
                files, errors, _ = ahead.result()
            doc, why = ahead.lookup()
            files, errors, _ = ahead.result()
        finally:
            _LISTEN.clear()
        calls = list(api.requests)
    assert why == "" and doc["spec"]["clusterIP"] == "10.96.0.20"
    assert errors == []
    assert json.loads(files[sources.SERVICES])["items"] == [doc]
    assert calls.count(get_web) == 1, calls
    assert len(calls) == 3, calls  # the Service, its EndpointSlices, this Node
    assert mine() == one_load, (mine(), one_load)


def test_a_service_the_api_does_not_have_is_said_to_the_focused_read(tmp_path, monkeypatch):
    from kpdiag.commands.pipeline import _api_ahead
    from tests.apiserver import ApiServer

    monkeypatch.delenv("NODE_NAME", raising=False)
    with ApiServer([k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")])]) as api:
        ahead = _api_ahead("shop/nope", api.kubeconfig(tmp_path), None, None)
        doc, why = ahead.lookup()
        ahead.result()
        calls = list(api.requests)
    assert doc is None and "nope" in why
    assert calls.count(("GET", "/api/v1/namespaces/shop/services/nope")) == 1, calls


def test_without_the_api_service_ipvs_mode_is_not_focused(tmp_path):
    from kpdiag.collect.node import NodeCollector

    reader = R.IpvsFocused(NodeCollector(host_root=None), "shop/web", lookup=None)
    with pytest.raises(R.NotFocused, match="nothing on the node names a Service"):
        reader._service_object()
    reader = R.IpvsFocused(NodeCollector(host_root=None), "shop/web", lookup=lambda: (None, "403 Forbidden"))
    with pytest.raises(R.NotFocused, match="403 Forbidden"):
        reader._service_object()


def test_a_spent_budget_is_not_focused_without_waiting():
    """One deadline for the whole read (every request of every address and port), not a timeout per answer: a budget
    already spent ends the read before anything is sent, in one line (the whole dump follows)."""
    with pytest.raises(R.NotFocused, match=r"the requests took more than the focused read's 0 s"):
        R.get_services([("tcp", "10.96.0.20", 80)] * 4096, budget=0)


def test_the_request_names_one_fwmark_virtual_server():
    """A firewall mark's virtual server is named by its family and mark alone (no address, port or protocol)."""
    body = R._service_key(R.FWMARK, "0.0.0.0", 0x4000)
    head = bytes([IPVS_CMD_GET_SERVICE, 1, 0, 0])
    svc = _decoded(struct.pack("=IHHII", 20 + len(body), 0, 1, 1, 0) + head + body).get_attr("IPVS_CMD_ATTR_SERVICE")
    assert svc.get_attr("IPVS_SVC_ATTR_FWMARK") == 0x4000
    assert svc.get_attr("IPVS_SVC_ATTR_AF") == socket.AF_INET
    assert svc.get_attr("IPVS_SVC_ATTR_ADDR") is None and svc.get_attr("IPVS_SVC_ATTR_PORT") is None


# kube-proxy's IPVS-mode chains as iptables -S lists them (the nat table's; the filter table sets no mark)
KUBE_IPVS_NAT = """\
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SERVICES -s 127.0.0.0/8 -j RETURN
-A KUBE-SERVICES -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KUBE-CLUSTER-IP src,dst -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT
-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
""".splitlines()


def _dest(addr: str, port: int | None, proto: str = "tcp"):
    from kpdiag.collect.iptables_focused import Destination

    return Destination(addr, port, proto)


def test_a_packet_meets_its_destinations_virtual_server_and_its_marks():
    """A live trace in IPVS mode asks for the virtual server at the packet's destination, and for the fwmark
    virtual server of every mark kube-proxy's MARK rules can give it (KUBE-MARK-MASQ's 0x4000)."""
    from kpdiag.collect.dest_rules import packet_keys

    assert packet_keys(_dest("10.96.0.20", 80), KUBE_IPVS_NAT) == [
        ("tcp", "10.96.0.20", 80),
        (R.FWMARK, "10.96.0.20", 0x4000),
        ("tcp", "10.96.0.20", 0),  # the catch-all port at that address
    ]
    assert packet_keys(_dest("192.168.50.1", 30080, "udp"), []) == [
        ("udp", "192.168.50.1", 30080),
        ("udp", "192.168.50.1", 0),
    ]
    # a DNAT on the path (a hostPort's): the virtual server at its target too, in the packet's family only
    dnat = [
        "-A CNI-DN-1 -p tcp -m tcp --dport 8080 -j DNAT --to-destination 10.244.1.5:80",
        "-A CNI-DN-1 -p tcp -m tcp --dport 8080 -j DNAT --to-destination [fd00::5]:80",
        "-A CNI-DN-2 -j DNAT --to-destination 10.244.1.6",
    ]
    assert packet_keys(_dest("192.168.50.1", 8080), dnat) == [
        ("tcp", "192.168.50.1", 8080),
        ("tcp", "10.244.1.5", 80),
        ("tcp", "10.244.1.6", 8080),
        ("tcp", "192.168.50.1", 0),
        ("tcp", "10.244.1.5", 0),
        ("tcp", "10.244.1.6", 0),
    ]
    # marks combine: two rules setting different bits give three marks
    two = ["-A X -j MARK --set-xmark 0x4000/0x4000", "-A Y -j MARK --set-xmark 0x1/0x1"]
    assert [k[2] for k in packet_keys(_dest("10.96.0.20", 80), two) if k[0] == R.FWMARK] == [0x1, 0x4000, 0x4001]


@pytest.mark.parametrize(
    "rules,dest,why",
    [
        (["-A X -p tcp -j REDIRECT --to-ports 15001"], ("10.96.0.20", 80), "REDIRECT"),
        (["-A X -j DNAT --to-destination 10.0.0.1-10.0.0.9:80"], ("10.96.0.20", 80), "range"),
        (["-A X -j CONNMARK --restore-mark --nfmask 0xffffffff --ctmask 0xffffffff"], ("10.96.0.20", 80), "mark"),
        ([f"-A X -j MARK --set-xmark {1 << i:#x}/{1 << i:#x}" for i in range(7)], ("10.96.0.20", 80), "64 marks"),
        ([], ("10.96.0.20", None), "no port"),
    ],
)
def test_a_packet_whose_virtual_servers_cannot_be_told_is_read_whole(rules, dest, why):
    from kpdiag.collect.dest_rules import packet_keys

    with pytest.raises(R.NotFocused, match=why):
        packet_keys(_dest(*dest), rules)


def test_a_live_trace_on_a_node_without_ipvs_reads_whole_saying_why():
    """No ip_vs here: the live trace's IPVS reader falls back to the whole read, and says why (as a warning)."""
    from kpdiag.collect.dest_rules import DestinationIpvs
    from kpdiag.collect.node import NodeCollector

    with pytest.raises(R.NotFocused, match="ip_vs kernel module is not loaded"):
        DestinationIpvs(NodeCollector(host_root=None), _dest("10.96.0.20", 80)).collect()


def test_kube_ipvs0_is_narrowed_to_the_addresses_in_focus():
    """kube-proxy binds every Service address on kube-ipvs0: a focused read keeps those its packets can be sent to
    (and their local routes), every other interface and route whole, and says how many it left out."""
    from kpdiag.collect.node import NodeCollector

    vips = [f"10.96.0.{i}" for i in range(1, 201)]
    links = [
        {"ifname": "eth0", "addr_info": [{"family": "inet", "local": "192.168.50.1", "prefixlen": 24}]},
        {"ifname": "kube-ipvs0", "addr_info": [{"family": "inet", "local": ip, "prefixlen": 32} for ip in vips]},
    ]
    local = lambda ip, dev: {"type": "local", "dst": ip, "dev": dev, "table": "local", "prefsrc": ip}  # noqa: E731
    routes = [local(ip, "kube-ipvs0") for ip in vips] + [
        local("192.168.50.1", "eth0"),
        {"dst": "192.168.50.0/24", "dev": "eth0", "table": "main", "type": "unicast"},
        {"dst": "10.97.0.0/16", "dev": "kube-ipvs0", "table": "main", "type": "unicast"},  # not an address's: kept
    ]
    c = NodeCollector(host_root=None)
    c.out.files[sources.IP_ADDR] = json.dumps(links).encode()
    c.out.files[sources.IP_ROUTE] = json.dumps(routes).encode()
    reader = R.IpvsFocused(c, "shop/web")
    holds = reader._narrow_bound({"10.96.0.20", "192.168.50.1", "10.96.9.9"})
    got_links = json.loads(c.out.files[sources.IP_ADDR])
    got_routes = json.loads(c.out.files[sources.IP_ROUTE])
    assert got_links[0] == links[0]
    assert [a["local"] for a in got_links[1]["addr_info"]] == ["10.96.0.20"]
    assert got_routes == [local("10.96.0.20", "kube-ipvs0")] + routes[-3:]
    assert reader.left_out == {sources.IP_ADDR: 199, sources.IP_ROUTE: 199}
    assert set(holds) == {sources.IP_ADDR, sources.IP_ROUTE} and "199 others left out" in holds[sources.IP_ADDR]
    # nothing to leave out: the files stay as read, and nothing is said
    c.out.files[sources.IP_ADDR] = json.dumps(links[:1]).encode()
    assert reader._narrow_bound({"10.96.0.20"}) == {} and reader.left_out == {}


def test_the_focused_links_step_reads_what_the_full_one_does():
    """A focused run reads addresses and routes with ``ip -j`` (decoded in C), a full run with pyroute2: on this host
    the same local addresses, and the same routing decision for each address of every interface and a few others."""
    from kpdiag.bundle.store import Bundle
    from kpdiag.collect.node import NodeCollector
    from kpdiag.parse.addr import parse_ip
    from kpdiag.state.node import NodeState

    states = []
    for step in ("links", "links_ip"):
        c = NodeCollector(host_root=None, only=[sources.IP_ADDR, sources.IP_ROUTE])
        getattr(c, step)()
        assert not c.out.errors, c.out.errors
        states.append(NodeState(Bundle.from_files("n", dict(c.out.files))))
    full, fast = (s.routing for s in states)
    assert full.local_ips == fast.local_ips and full.local_ips
    others = ["8.8.8.8", "10.96.0.20", "127.0.0.1", "::1", "2001:db8::1"]
    for addr in {str(a.get("local")) for link in states[0].ip_addr for a in link.get("addr_info") or []} | set(others):
        ip, version = parse_ip(addr)
        a, b = full.lookup(ip, version), fast.lookup(ip, version)
        assert (a and (a.type, a.dev, a.gateway, a.table)) == (b and (b.type, b.dev, b.gateway, b.table)), addr

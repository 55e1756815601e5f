"""The kernel as oracle for routes into a link without carrier: Docker's docker0 after its last container left (a
bridge with no port: NO-CARRIER, state DOWN) and a veth whose peer is down, each with a connected route shadowing a
network that really lies behind the default gateway (172.17.5.10 and 10.50.3.3 on the "office" router).

What the kernel does, and kpdiag must model (kpdiag/trace/routing.py, walker.py ``_leave``): it still chooses the
linkdown route (``ip route get``) while net.ipv4.conf.{all,DEV}.ignore_routes_with_linkdown is 0; a real connection
through the node, or from the node itself, fails with EHOSTUNREACH after about 3 s (the next hop is never resolved:
the device transmits nothing). With the sysctl at 1 for the device or for "all" the next route (the default) is
taken and the connection succeeds. kpdiag's own collector records the state (NO-CARRIER, linkdown).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kpdiag.bundle.store import Bundle
from kpdiag.parse.addr import parse_ip
from kpdiag.state.node import NodeState
from kpdiag.trace.model import Packet

from .bundle_from_ns import bundle_from_ns

pytestmark = pytest.mark.lab

SHADOWED = {"172.17.5.10": "docker0", "10.50.3.3": "vethd"}
CONNECT = (
    "import errno, socket, sys, time\nt = time.monotonic(); s = socket.socket(); s.settimeout(8)\n"
    "try:\n    s.connect((sys.argv[1], 5432)); r = 'connected'\n"
    "except socket.timeout:\n    r = 'timeout'\n"
    "except OSError as e:\n    r = errno.errorcode.get(e.errno, str(e.errno))\n"
    "print(r, round(time.monotonic() - t, 2))\n"
)


def build(lab) -> None:
    """node: ext0 (client 192.168.50.2), up0 → office 192.168.60.1 (default route); office holds 172.17.5.10 and
    10.50.3.3 and listens on 5432. docker0 172.17.0.1/16 lost its last port; vethd 10.50.0.1/16 has its peer down."""
    for role in ("node", "client", "office"):
        lab.add_ns(role)
    lab.veth("client", "eth0", "node", "ext0")
    lab.veth("office", "eth0", "node", "up0")
    lab.addr("client", "eth0", "192.168.50.2/24")
    lab.addr("node", "ext0", "192.168.50.1/24")
    lab.addr("office", "eth0", "192.168.60.1/24")
    lab.addr("node", "up0", "192.168.60.2/24")
    for ip in SHADOWED:
        lab.addr("office", "lo", f"{ip}/32")
    lab.route("client", "default", "via", "192.168.50.1")
    lab.route("office", "default", "via", "192.168.60.2")
    lab.route("node", "default", "via", "192.168.60.1")
    lab.sysctl("node", "net.ipv4.ip_forward", "1")
    docker0(lab)
    lab.sh("node", ["ip", "link", "add", "vethd", "type", "veth", "peer", "name", "vethd-p"])
    lab.sh("node", ["ip", "link", "set", "vethd", "up"])  # its peer stays down: vethd has no carrier
    lab.addr("node", "vethd", "10.50.0.1/16")


def docker0(lab, role: str = "node") -> None:
    """Docker's bridge as a node shows it once its last container is gone: up, 172.17.0.1/16, no port, no carrier."""
    lab.sh(role, ["ip", "link", "add", "docker0", "type", "bridge"])
    lab.sh(role, ["ip", "link", "set", "docker0", "up"])
    lab.addr(role, "docker0", "172.17.0.1/16")
    lab.sh(role, ["ip", "link", "add", "vethc", "type", "veth", "peer", "name", "vethc-p"])
    lab.sh(role, ["ip", "link", "set", "vethc", "master", "docker0"])
    for dev in ("vethc", "vethc-p"):
        lab.sh(role, ["ip", "link", "set", dev, "up"])
    lab.sh(role, ["ip", "link", "del", "vethc"])  # the container left: the bridge loses its carrier


def _kernel_route(lab, dst: str, origin: str) -> dict:
    where = ["from", "192.168.50.2", "iif", "ext0"] if origin == "client" else []
    return json.loads(lab.sh("node", ["ip", "-j", "route", "get", dst, *where]).stdout)[0]


def _connect(lab, role: str, dst: str) -> tuple[str, float]:
    out = lab.sh(role, [sys.executable, "-c", CONNECT, dst]).stdout.split()
    return out[0], float(out[1])


def _state(lab, tmp_path, name: str) -> NodeState:
    return NodeState(Bundle.open(bundle_from_ns(lab, "node", str(tmp_path / name))))


def test_kernel_agrees_on_routes_into_links_without_carrier(lab, tmp_path):
    build(lab)
    lab.background("office", [sys.executable, "-m", "http.server", "5432", "--bind", "0.0.0.0"], subprocess.DEVNULL)
    lab.sh("office", [sys.executable, "-c", "import time; time.sleep(0.5)"])
    state = _state(lab, tmp_path, "zero")
    links = {link["ifname"]: link for link in state.ip_addr}
    routes = {r.get("dst"): r for r in state.ip_route if r.get("table", "main") == "main"}
    # kpdiag's collector records what ip shows: NO-CARRIER on the interfaces, linkdown on their routes
    for dev in SHADOWED.values():
        assert links[dev]["flags"][0] == "NO-CARRIER" and "UP" in links[dev]["flags"], links[dev]
    assert "linkdown" in routes["172.17.0.0/16"]["flags"] and "linkdown" in routes["10.50.0.0/16"]["flags"]
    assert "flags" not in routes["192.168.60.0/24"]

    # sysctl 0 (the default): the kernel chooses the dead route, and the connection fails after ~3 s
    tracer = state.mode_tracer("iptables")
    for dst, dev in SHADOWED.items():
        for origin in ("client", "node"):
            kernel = _kernel_route(lab, dst, origin)
            src = "192.168.50.2" if origin == "client" else "192.168.60.2"
            route = state.routing.lookup(
                parse_ip(dst)[0], 4, src=parse_ip(src)[0], iif="ext0" if origin == "client" else "lo"
            )
            assert kernel["dev"] == dev and route.dev == dev and route.linkdown, (kernel, route)
            result, took = _connect(lab, origin if origin == "client" else "node", dst)
            assert result == "EHOSTUNREACH" and 2.0 < took < 6.0, (dst, origin, result, took)
            packet = (
                Packet(src, dst, "tcp", 5432, origin="node")
                if origin == "node"
                else Packet(src, dst, "tcp", 5432, iif="ext0")
            )
            paths = tracer.trace(packet).paths
            want = "EHOSTUNREACH" if origin == "node" else "icmp-host-unreachable"
            assert [(p.verdict, p.reject_with, p.route["dev"]) for p in paths] == [("reject", want, dev)], paths
            assert "no carrier" in " ".join(paths[0].notes)

    # ignore_routes_with_linkdown = 1 on docker0: docker0's route is passed over, vethd's still taken
    lab.sysctl("node", "net.ipv4.conf.docker0.ignore_routes_with_linkdown", "1")
    state = _state(lab, tmp_path, "docker0")
    for dst, dev in SHADOWED.items():
        kernel = _kernel_route(lab, dst, "client")
        route = state.routing.lookup(parse_ip(dst)[0], 4, src=parse_ip("192.168.50.2")[0], iif="ext0")
        assert (route.dev, route.gateway) == (kernel["dev"], kernel.get("gateway")), (dst, kernel, route)
        assert kernel["dev"] == ("up0" if dev == "docker0" else dev)
    assert _connect(lab, "client", "172.17.5.10")[0] == "connected"
    paths = state.mode_tracer("iptables").trace(Packet("192.168.50.2", "172.17.5.10", "tcp", 5432, iif="ext0")).paths
    assert [(p.verdict, p.delivery, p.route["dev"]) for p in paths] == [("accept", "forward", "up0")]

    # = 1 for "all" (docker0 back to 0): every linkdown route is passed over
    lab.sysctl("node", "net.ipv4.conf.docker0.ignore_routes_with_linkdown", "0")
    lab.sysctl("node", "net.ipv4.conf.all.ignore_routes_with_linkdown", "1")
    state = _state(lab, tmp_path, "all")
    for dst in SHADOWED:
        kernel = _kernel_route(lab, dst, "client")
        route = state.routing.lookup(parse_ip(dst)[0], 4, src=parse_ip("192.168.50.2")[0], iif="ext0")
        assert (route.dev, route.gateway) == (kernel["dev"], kernel.get("gateway")) == ("up0", "192.168.60.1")
        assert _connect(lab, "client", dst)[0] == "connected"

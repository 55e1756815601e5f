"""Runs in the QEMU guest (Debian's kernel, with IPVS): builds each scenario in network namespaces, sends real
connections, records what the kernel did and what kpdiag collects. Standard library only (the guest's python3).

    python3 inside.py WORK        # WORK/scenarios.json in, WORK/<scenario>/... out

Topology per scenario (fresh namespaces each time):
    client 192.168.50.2/24 ─ ext0 192.168.50.1/24 [node] cni0 10.244.1.1/24 ─ podN 10.244.1.(10+N)/24
    the node holds kube-proxy's IPVS state: kube-ipvs0 (dummy) with the bound IPs, ipsets, iptables rules,
    virtual servers (ipvsadm -R); each pod answers every TCP/UDP port it serves with its own name.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
PYCACHE = "/tmp/kpdiag-pycache"  # the guest's own (tmpfs): the shared folder is the host's
SERVER = r"""
import ctypes, json, os, socket, sys, threading
# one process for every pod (a Python start costs seconds under emulation): each socket is made in its pod's network
# namespace (setns of this thread, then back), and answers with that pod's name
libc = ctypes.CDLL(None, use_errno=True)
home = os.open("/proc/self/ns/net", os.O_RDONLY)
def enter(fd):
    if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
        raise OSError(ctypes.get_errno(), "setns")
def tcp(s, name):
    while True:
        c, _ = s.accept(); c.sendall(name.encode()); c.close()
def udp(s, name):
    while True:
        _, peer = s.recvfrom(512); s.sendto(name.encode(), peer)
for pod, specs in json.loads(sys.argv[1]).items():
    fd = os.open(f"/run/netns/{pod}", os.O_RDONLY)
    enter(fd)
    for spec in specs:
        proto, port = spec.split(":")
        if proto == "tcp":
            s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", int(port))); s.listen(64)
        else:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", int(port)))
        threading.Thread(target=tcp if proto == "tcp" else udp, args=(s, pod), daemon=True).start()
    enter(home)
    os.close(fd)
print("ready", flush=True)
threading.Event().wait()
"""
CLIENT = r"""
import errno, json, socket, sys
plan = json.load(sys.stdin)
out = []
for c in plan:
    res = []
    for i in range(c["count"]):
        kind = socket.SOCK_STREAM if c["proto"] == "tcp" else socket.SOCK_DGRAM
        s = socket.socket(socket.AF_INET, kind)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.settimeout(c.get("timeout", 2.0))
        sport = c["sport"] + i
        try:
            s.bind((c.get("src", ""), sport))
            s.connect((c["dst"], c["dport"]))
            if kind == socket.SOCK_DGRAM:
                s.send(b"q")
            data = s.recv(64)
            res.append({"sport": sport, "answer": data.decode()})
        except socket.timeout:
            res.append({"sport": sport, "error": "ETIMEDOUT"})
        except OSError as e:
            res.append({"sport": sport, "error": errno.errorcode.get(e.errno, str(e.errno))})
        finally:
            s.close()
    out.append(dict(c, results=res))
print(json.dumps(out))
"""

FOCUSED = r"""
import json, os, subprocess, sys, time
from kpdiag.bundle.store import write_bundle
from kpdiag.collect.ipvs_rules import get_services, node_addresses, service_keys
from kpdiag.collect.node import collect_node
from kpdiag.collect.service_rules import focused_rules
plan = json.load(sys.stdin)
bench = {}
if plan["bench"]:  # benchmarks/bench_ipvs_focused.py: the whole collection in this process too, to compare
    t, c = time.monotonic(), time.process_time()
    files, manifest = collect_node()
    bench["whole_collection"] = {"seconds": time.monotonic() - t, "cpu": time.process_time() - c}
addrs = node_addresses(subprocess.run(["ip", "-j", "addr"], capture_output=True).stdout)
out = []
import resource
from kpdiag.collect import ipvs_rules as R
def children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime
t, c = time.monotonic(), children()
subprocess.run(["ipvsadm", "-Sn"], capture_output=True, check=True)
whole = {"seconds": time.monotonic() - t, "cpu": children() - c}
# the whole table over netlink, as the same requests would dump it (one dump of the services, one of each's dests)
t, c = time.monotonic(), time.process_time()
nl = R.Netlink()
svcs = [R._service(R._attrs(a[R.IPVS_CMD_ATTR_SERVICE])) for a in nl.request(nl.family, R.IPVS_CMD_GET_SERVICE, 1, [], dump=True)]
for s in svcs:
    nl.request(nl.family, R.IPVS_CMD_GET_DEST, 1, [R._service_key(s.proto, s.addr, s.port)], dump=True)
nl.close()
whole_nl = {"seconds": time.monotonic() - t, "cpu": time.process_time() - c, "services": len(svcs)}
for i, f in enumerate(plan["focus"]):
    keys = service_keys(f["object"], addrs)
    t, c = time.monotonic(), time.process_time()
    found = get_services(keys)
    ipvs = {"seconds": time.monotonic() - t, "cpu": time.process_time() - c, "asked": len(keys), "found": len(found)}
    t, c = time.monotonic(), time.process_time()
    files, manifest = collect_node(rules=focused_rules(f["service"], lambda f=f: (f["object"], "")))
    write_bundle(files, os.path.join(sys.argv[1], f"focused-{i}"), manifest)
    out.append({"service": f["service"], "bundle": f"focused-{i}", "seconds": time.monotonic() - t,
                "cpu": time.process_time() - c, "ipvs": ipvs, "ipvsadm_Sn": whole, "whole_netlink": whole_nl, **bench,
                "partial": manifest.get("partial"), "errors": manifest.get("errors"),
                "timings": manifest.get("timings")})
# a live kpdiag trace of each packet: the whole rules once, then the focused read of each (kpdiag/collect/dest_rules.py)
from kpdiag.collect.dest_rules import Destination
from kpdiag.render.trace import trace_to_json
from kpdiag.commands.trace import explain_unmatched, setup_trace
from kpdiag.trace.model import Packet
traces = []
if plan.get("packets"):
    t, c = time.monotonic(), time.process_time()
    whole = setup_trace(live=True)
    whole_cost = {"seconds": time.monotonic() - t, "cpu": time.process_time() - c}
    for i, p in enumerate(plan["packets"]):
        t, c = time.monotonic(), time.process_time()
        part = setup_trace(live=True, dest=Destination(p["dst"], p["dport"], p["proto"]))
        cost = {"seconds": time.monotonic() - t, "cpu": time.process_time() - c}
        pk = Packet(src=p["src"], dst=p["dst"], proto=p["proto"], dport=p["dport"], sport=43000 + i, origin=p["frm"])
        traces.append({"packet": p, "whole": trace_to_json(explain_unmatched(whole.tracer.trace(pk), whole)),
                       "focused": trace_to_json(explain_unmatched(part.tracer.trace(pk), part)),
                       "read": part.read, "problems": [str(x) for x in part.problems], "mode": part.mode,
                       "whole_mode": whole.mode, "cost": cost, "whole_cost": whole_cost})
with open(os.path.join(sys.argv[1], "traces.json"), "w") as fh:
    json.dump(traces, fh)
print(json.dumps(out))
"""


def sh(*argv: str, input: str | None = None, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    p = subprocess.run(list(argv), input=input, capture_output=True, text=True, env=ENV, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {p.returncode}: {p.stderr.strip()[:400]}")
    return p


def nsx(ns: str, *argv: str, **kw) -> subprocess.CompletedProcess:
    return sh("ip", "netns", "exec", ns, *argv, **kw)


def batch(lines: list[str], ns: str | None = None) -> None:
    """Many ip commands in one process (each process costs a tenth of a second or more under emulation)."""
    sh("ip", *(["-n", ns] if ns else []), "-batch", "-", input="".join(line + "\n" for line in lines))


def veth(a: str, a_if: str, b: str, b_if: str) -> str:
    """The ip command of a veth pair made with its ends in namespaces a and b."""
    return f"link add {a_if} netns {a} type veth peer name {b_if} netns {b}"


def namespaces(sc: dict) -> list[str]:
    return ["node", "client"] + [f"pod{i}" for i in range(sc.get("pods", 4))]


def build(sc: dict) -> list[subprocess.Popen]:
    pods = [f"pod{i}" for i in range(sc.get("pods", 4))]
    batch([f"netns add {ns}" for ns in namespaces(sc)])
    batch([veth("client", "eth0", "node", "ext0")] + [veth(p, "eth0", "node", f"veth{i}") for i, p in enumerate(pods)])
    batch(
        [
            "link set lo up",
            "link set eth0 up",
            "addr add 192.168.50.2/24 dev eth0",
            "route add default via 192.168.50.1",
        ],
        "client",
    )
    for i, p in enumerate(pods):
        batch(
            [
                "link set lo up",
                "link set eth0 up",
                f"addr add 10.244.1.{10 + i}/24 dev eth0",
                "route add default via 10.244.1.1",
            ],
            p,
        )
    node = ["link set lo up", "link set ext0 up", "addr add 192.168.50.1/24 dev ext0"]
    node += ["link add cni0 type bridge", "link set cni0 up", "addr add 10.244.1.1/24 dev cni0"]
    for i in range(len(pods)):
        node += [
            f"link set veth{i} master cni0",
            f"link set veth{i} type bridge_slave hairpin on",
            f"link set veth{i} up",
        ]
    node += ["link add kube-ipvs0 type dummy"]
    node += [f"addr add {ip}/32 dev kube-ipvs0" for ip in sc.get("bound", [])]
    batch(node, "node")
    sysctls = {"net.ipv4.ip_forward": "1", **sc.get("sysctls", {})}
    nsx("node", "sysctl", "-qw", *(f"{key}={value}" for key, value in sysctls.items()))
    if sc.get("ipset"):
        nsx("node", "ipset", "restore", input=sc["ipset"])
    if sc.get("iptables"):
        nsx("node", "iptables-restore", input=sc["iptables"])
    if sc.get("ipvsadm"):
        nsx("node", "ipvsadm", "-R", input=sc["ipvsadm"])
    for cmd in sc.get("node_cmds", []):
        nsx("node", *cmd)
    if not sc.get("servers"):
        return []
    p = subprocess.Popen(
        ["python3", "-c", SERVER, json.dumps(sc["servers"])],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=ENV,
    )
    line = p.stdout.readline()
    if line.strip() != "ready":
        raise RuntimeError(f"the pods' servers did not start: {line}{p.stdout.read()[-400:]}")
    return [p]


def teardown(sc: dict, servers: list[subprocess.Popen]) -> None:
    for p in servers:
        p.kill()
        p.wait()
    sh("ip", "-force", "-batch", "-", input="".join(f"netns del {ns}\n" for ns in namespaces(sc)), check=False)


def connect(plan: list[dict]) -> list[dict]:
    by_origin: dict[str, list[dict]] = {}
    for c in plan:
        by_origin.setdefault(c["origin"], []).append(c)
    done = []
    for origin, items in by_origin.items():
        p = nsx(origin, "python3", "-c", CLIENT, input=json.dumps(items), timeout=600)
        done += json.loads(p.stdout)
    return done


def arp_probe(target: str) -> bool:
    """Does the node answer ARP for ``target`` on the client's link? (the kernel's own neighbour resolution)"""
    nsx("client", "ip", "neigh", "flush", "dev", "eth0", check=False)
    poke = (
        "import socket,time; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.sendto(b'x',(%r,9)); time.sleep(1.5)"
    )
    nsx("client", "python3", "-c", poke % target, check=False)
    out = nsx("client", "ip", "-j", "neigh", "show", "dev", "eth0", check=False).stdout or "[]"
    return any(n.get("dst") == target and "lladdr" in n for n in json.loads(out))


BUNDLE_COMMANDS = {  # a bundle made by hand, as the bundle format allows: the plain output of each command
    "node/iptables-save.txt": ["iptables-save"],
    "node/ipset.txt": ["ipset", "save"],
    "node/ipvsadm.txt": ["ipvsadm", "-Sn"],
    "node/ipvsadm-list.txt": ["ipvsadm", "-Ln"],
    "node/ip-addr.json": ["ip", "-j", "addr"],
    "node/ip-route.json": ["ip", "-j", "route", "show", "table", "all"],
    "node/ip-rule.json": ["ip", "-j", "rule"],
    "node/sysctl.txt": ["sysctl", "-a"],
    "node/uname.txt": ["uname", "-r"],
    "node/modules.txt": ["cat", "/proc/modules"],
}


def shell_bundle(bundle: str) -> None:
    """The node's state by the standard commands (fast under emulation; kpdiag's own collector is compared with
    them in the scenarios that use it)."""
    os.makedirs(os.path.join(bundle, "node"), exist_ok=True)
    for rel, argv in BUNDLE_COMMANDS.items():
        p = nsx("node", *argv, check=False)
        with open(os.path.join(bundle, rel), "w") as fh:
            fh.write(p.stdout)
    manifest = {
        "format": "kpdiag-bundle/1",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "node": "ipvs-vm",
        "kpdiag_version": "0.1.0",
        "errors": [],
    }
    with open(os.path.join(bundle, "kpdiag.json"), "w") as fh:
        json.dump(manifest, fh)


def kpdiag(ns: str, *args: str, src: str) -> subprocess.CompletedProcess:
    env = dict(ENV, PYTHONPATH=src, PYTHONPYCACHEPREFIX=PYCACHE, COLUMNS="100")
    return subprocess.run(
        ["ip", "netns", "exec", ns, "python3", "-m", "kpdiag", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )


def run_scenario(sc: dict, out: str, src: str) -> dict:
    t0 = time.monotonic()
    rec: dict = {"name": sc["name"]}
    if sc.get("hide_ipvs_modules"):
        # a node whose kernel cannot do IPVS: the modules are not there and not loaded (the preflight's subject)
        rel = os.uname().release
        ipvs_dir = f"/lib/modules/{rel}/kernel/net/netfilter/ipvs"
        hidden = "/ipvs-modules-removed"  # outside /lib/modules: depmod (and so modprobe) no longer finds them
        index = f"/lib/modules/{rel}"
        saved = "/modules-index-saved"  # the module index with IPVS, put back afterwards (depmod is slow emulated)
        os.makedirs(saved, exist_ok=True)
        for name in os.listdir(index):
            if name.startswith("modules."):
                shutil.copy2(os.path.join(index, name), saved)
        os.rename(ipvs_dir, hidden)
        sh("depmod", "-a")
        try:
            for ns in ("node",):
                sh("ip", "netns", "add", ns)
            p = kpdiag("node", "node", "--preflight", "ipvs", "-o", "json", src=src)
            rec["preflight_without"] = {"rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr[-2000:]}
            p = kpdiag("node", "collect", "-o", os.path.join(out, "bundle-without"), src=src)
            rec["collect_without"] = {"rc": p.returncode, "stderr": p.stderr[-2000:]}
            rec["modules_without"] = open("/proc/modules").read()
        finally:
            os.rename(hidden, ipvs_dir)
            for name in os.listdir(saved):
                shutil.copy2(os.path.join(saved, name), index)
            sh("ip", "netns", "del", "node", check=False)

        def step(name: str) -> None:
            sh("ip", "netns", "add", "node")
            try:
                p = kpdiag("node", "node", "--preflight", "ipvs", "-o", "json", src=src)
                rec[name] = {"rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr[-2000:]}
            finally:
                sh("ip", "netns", "del", "node", check=False)

        # the walkthrough, step by step: the modules are back on disk but not loaded …
        step("preflight_not_loaded")
        # … loaded (modprobe; the sysctls still the kernel's defaults in a new namespace) …
        for m in ("ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "nf_conntrack"):
            sh("modprobe", m)
        step("preflight_loaded")
        # … and the sysctls kube-proxy needs set (in the node's namespace, as kube-proxy sets them)
        sh("ip", "netns", "add", "node")
        try:
            for key, value in sc.get("sysctls", {}).items():
                nsx("node", "sysctl", "-qw", f"{key}={value}", check=False)
            p = kpdiag("node", "node", "--preflight", "ipvs", "-o", "json", src=src)
            rec["preflight_with"] = {"rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr[-2000:]}
        finally:
            sh("ip", "netns", "del", "node", check=False)
        rec["seconds"] = round(time.monotonic() - t0, 1)
        return rec
    servers = build(sc)
    try:
        rec["setup_seconds"] = round(time.monotonic() - t0, 1)
        rec["connections"] = connect(sc.get("connections", []))
        rec["connect_seconds"] = round(time.monotonic() - t0, 1)
        if sc.get("arp"):
            rec["arp"] = {ip: arp_probe(ip) for ip in sc["arp"]}
        rec["ipvsadm_Sn"] = nsx("node", "ipvsadm", "-Sn").stdout
        rec["ipvsadm_Ln"] = nsx("node", "ipvsadm", "-Ln").stdout
        rec["ipvsadm_Lnc"] = nsx("node", "ipvsadm", "-Lnc").stdout
        rec["setup_seconds"] = round(time.monotonic() - t0, 1)
        bundle = os.path.join(out, "bundle")
        if sc.get("collect") == "kpdiag":
            p = kpdiag("node", "collect", "-o", bundle, src=src)
            rec["collect"] = {"rc": p.returncode, "stderr": p.stderr[-3000:], "by": "kpdiag"}
            if sc.get("focus"):  # kpdiag node --service's read of each (the API's Service given, as the API would)
                env = dict(ENV, PYTHONPATH=src, PYTHONPYCACHEPREFIX=PYCACHE)
                p = subprocess.run(
                    ["ip", "netns", "exec", "node", "python3", "-c", FOCUSED, out],
                    input=json.dumps(
                        {"focus": sc["focus"], "bench": sc.get("bench", False), "packets": sc.get("packets", [])}
                    ),
                    capture_output=True,
                    text=True,
                    env=env,
                    timeout=1800,
                )
                if p.returncode != 0:
                    raise RuntimeError(f"focused reads: {p.stderr[-2000:]}")
                rec["focused"] = json.loads(p.stdout)
        else:
            shell_bundle(bundle)
            rec["collect"] = {"rc": 0, "stderr": "", "by": "commands"}
    finally:
        teardown(sc, servers)
    rec["seconds"] = round(time.monotonic() - t0, 1)
    return rec


def load_modules() -> None:
    for m in (
        "ip_vs",
        "ip_vs_rr",
        "ip_vs_wrr",
        "ip_vs_sh",
        "ip_vs_lc",
        "ip_vs_wlc",
        "ip_vs_sed",
        "ip_vs_nq",
        "ip_vs_dh",
    ):
        sh("modprobe", m, check=False)
    sh("modprobe", "nf_conntrack")
    sh("modprobe", "xt_set", check=False)
    sh("modprobe", "br_netfilter", check=False)  # kubelet's prerequisite: bridged pod traffic meets iptables/IPVS


def main() -> int:
    work = sys.argv[1]
    src = os.path.join(work, "src")
    # kpdiag compiled once, not at every start (compiling it costs seconds under emulation)
    subprocess.run(
        ["python3", "-m", "compileall", "-q", src],
        env=dict(ENV, PYTHONPYCACHEPREFIX=PYCACHE),
        capture_output=True,
        timeout=900,
    )
    with open(os.path.join(work, "scenarios.json")) as fh:
        scenarios = json.load(fh)
    results = {}
    # the no-modules scenario first, before anything loads ip_vs
    for sc in sorted(scenarios, key=lambda s: not s.get("hide_ipvs_modules")):
        if not sc.get("hide_ipvs_modules"):
            load_modules()
        out = os.path.join(work, "out", sc["name"])
        os.makedirs(out, exist_ok=True)
        try:
            results[sc["name"]] = run_scenario(sc, out, src)
        except Exception as exc:  # recorded: the host test of that scenario fails with it
            results[sc["name"]] = {"name": sc["name"], "error": f"{exc.__class__.__name__}: {exc}"}
            teardown(sc, [])
        print(f"scenario {sc['name']}: {results[sc['name']].get('seconds', 'error')} s", flush=True)
        with open(os.path.join(work, "results.json"), "w") as fh:
            json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

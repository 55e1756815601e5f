"""A lab of network namespaces on the real kernel: client → node → pods (+ a router).

Used by the lab tests and by ``fixtures/make_fixtures.py``. Everything it creates carries a
unique prefix and is removed on exit, also when a test fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field

ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}


def can_run_lab() -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, "needs root (network namespaces)"
    for tool in ("ip", "iptables-restore", "iptables-save", "nft"):
        if shutil.which(tool) is None:
            return False, f"needs {tool} (apt-get install iptables nftables iproute2)"
    return True, ""


def run(
    argv: list[str], input: str | None = None, timeout: float = 60, check: bool = True
) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout, env=ENV)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()[:500]}")
    return proc


@dataclass
class Lab:
    """Namespaces named ``<prefix>-<role>``; veth pairs between them."""

    prefix: str = field(default_factory=lambda: "kp" + uuid.uuid4().hex[:6])
    namespaces: list[str] = field(default_factory=list)
    _bg: list[subprocess.Popen] = field(default_factory=list)

    def ns(self, role: str) -> str:
        return f"{self.prefix}-{role}"

    def add_ns(self, role: str) -> str:
        name = self.ns(role)
        run(["ip", "netns", "add", name])
        self.namespaces.append(name)
        self.sh(role, ["ip", "link", "set", "lo", "up"])
        return name

    def sh(self, role: str, argv: list[str], input: str | None = None, timeout: float = 120, check: bool = True):
        return run(["ip", "netns", "exec", self.ns(role)] + argv, input=input, timeout=timeout, check=check)

    def set_resolv(self, role: str, text: str) -> None:
        """/etc/resolv.conf as seen inside the namespace (ip netns exec bind-mounts /etc/netns/NAME/)."""
        d = f"/etc/netns/{self.ns(role)}"
        os.makedirs(d, exist_ok=True)
        with open(f"{d}/resolv.conf", "w") as fh:
            fh.write(text)

    def veth(self, a: str, a_if: str, b: str, b_if: str) -> None:
        tmp_a, tmp_b = f"v{uuid.uuid4().hex[:8]}", f"v{uuid.uuid4().hex[:8]}"
        run(["ip", "link", "add", tmp_a, "type", "veth", "peer", "name", tmp_b])
        run(["ip", "link", "set", tmp_a, "netns", self.ns(a)])
        run(["ip", "link", "set", tmp_b, "netns", self.ns(b)])
        self.sh(a, ["ip", "link", "set", tmp_a, "name", a_if])
        self.sh(b, ["ip", "link", "set", tmp_b, "name", b_if])
        self.sh(a, ["ip", "link", "set", a_if, "up"])
        self.sh(b, ["ip", "link", "set", b_if, "up"])

    def addr(self, role: str, dev: str, cidr: str) -> None:
        self.sh(role, ["ip", "addr", "add", cidr, "dev", dev])

    def route(self, role: str, *spec: str) -> None:
        self.sh(role, ["ip", "route", "add", *spec])

    def sysctl(self, role: str, key: str, value: str) -> None:
        self.sh(role, ["sysctl", "-qw", f"{key}={value}"])

    def background(self, role: str, argv: list[str], stdout) -> subprocess.Popen:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.ns(role)] + argv, stdout=stdout, stderr=subprocess.STDOUT, env=ENV
        )
        self._bg.append(proc)
        return proc

    def close(self) -> None:
        for proc in self._bg:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
        for name in reversed(self.namespaces):
            run(["ip", "netns", "del", name], check=False)
            shutil.rmtree(f"/etc/netns/{name}", ignore_errors=True)
        self.namespaces.clear()

    def __enter__(self) -> "Lab":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class KubeNodeLab:
    """client (external host) — node (kube-proxy rules) — pods on a bridge; optional router.

    client 192.168.50.2/24 ⇄ node ext0 192.168.50.1/24
    pods   10.244.1.N/24 on bridge cni0 (node 10.244.1.1)
    router 192.168.60.1/24 ⇄ node up0 192.168.60.2/24 (the node's default gateway, when asked)
    """

    lab: Lab
    pods: dict[str, str] = field(default_factory=dict)  # role → IP
    node_ips: list[str] = field(default_factory=lambda: ["192.168.50.1", "10.244.1.1"])
    client_ip: str = "192.168.50.2"

    @classmethod
    def build(cls, lab: Lab, pod_count: int = 4, router: bool = False) -> "KubeNodeLab":
        self = cls(lab)
        lab.add_ns("node")
        lab.add_ns("client")
        lab.veth("client", "eth0", "node", "ext0")
        lab.addr("client", "eth0", "192.168.50.2/24")
        lab.addr("node", "ext0", "192.168.50.1/24")
        lab.route("client", "default", "via", "192.168.50.1")
        lab.sh("node", ["ip", "link", "add", "cni0", "type", "bridge"])
        lab.sh("node", ["ip", "link", "set", "cni0", "up"])
        lab.addr("node", "cni0", "10.244.1.1/24")
        for i in range(pod_count):
            role = f"pod{i}"
            ip = f"10.244.1.{10 + i}"
            lab.add_ns(role)
            lab.veth(role, "eth0", "node", f"veth{i}")
            lab.sh("node", ["ip", "link", "set", f"veth{i}", "master", "cni0"])
            lab.addr(role, "eth0", f"{ip}/24")
            lab.route(role, "default", "via", "10.244.1.1")
            self.pods[role] = ip
        lab.sysctl("node", "net.ipv4.ip_forward", "1")
        if router:
            lab.add_ns("router")
            lab.veth("router", "eth0", "node", "up0")
            lab.addr("router", "eth0", "192.168.60.1/24")
            lab.addr("node", "up0", "192.168.60.2/24")
            lab.route("node", "default", "via", "192.168.60.1")
            lab.sysctl("router", "net.ipv4.ip_forward", "1")
            self.node_ips.append("192.168.60.2")
        return self

    def load_iptables(self, text: str) -> None:
        self.lab.sh("node", ["iptables-restore"], input=text, timeout=300)

    def load_nft(self, text: str) -> None:
        self.lab.sh("node", ["nft", "-f", "-"], input=text, timeout=300)


TRACE_TABLE = "kpdiag_oracle"


class KernelTrace:
    """The kernel as oracle: ``nft monitor trace`` in a namespace, written to a file.

    Packets are marked for tracing by a tiny table of our own (priority -350, before raw), for
    the source-port range ``sports`` (TCP/UDP) so only test packets are traced.
    """

    def __init__(self, lab: Lab, role: str, sports: str = "41000-41999", family: str = "ip"):
        self.lab, self.role, self.sports, self.family = lab, role, sports, family  # family "ip6" for IPv6 packets
        self.path = tempfile.mktemp(prefix="kpdiag-trace-", suffix=".txt")
        self._fh = None
        self._proc = None

    def __enter__(self) -> "KernelTrace":
        rules = (
            f"table {self.family} {TRACE_TABLE} {{\n"
            f"  chain pre {{ type filter hook prerouting priority -350; th sport {self.sports} meta nftrace set 1; }}\n"
            f"  chain out {{ type filter hook output priority -350; th sport {self.sports} meta nftrace set 1; }}\n"
            "}\n"
        )
        self.lab.sh(self.role, ["nft", "-f", "-"], input=rules)
        self._fh = open(self.path, "w")
        self._proc = self.lab.background(self.role, ["nft", "monitor", "trace"], self._fh)
        time.sleep(1.5)  # nft reads the whole ruleset into its cache before it prints events
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
        self.lab.sh(self.role, ["nft", "delete", "table", self.family, TRACE_TABLE], check=False)
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def stop(self) -> None:
        if self._proc and self._proc.poll() is None:
            time.sleep(0.5)
            self._proc.terminate()
            self._proc.wait(5)
        if self._fh:
            self._fh.close()
            self._fh = None

    def events(self) -> dict[str, list[str]]:
        """Trace lines grouped by trace id (one id per packet)."""
        self.stop()
        groups: dict[str, list[str]] = {}
        with open(self.path) as fh:
            for line in fh:
                m = re.match(r"trace id (\w+) (.*)", line.strip())
                if m:
                    groups.setdefault(m.group(1), []).append(m.group(2))
        return groups


@dataclass
class KernelFate:
    """What the kernel did to one packet, read from its trace lines."""

    sport: int
    dnat_chain: str | None = None  # the KUBE-SEP-* chain that DNATed it
    dnat_to: str | None = None
    masquerade: bool = False
    verdict: str = "accept"
    lines: list[str] = field(default_factory=list)


def kernel_fates(groups: dict[str, list[str]]) -> dict[int, KernelFate]:
    """Per source port: DNAT, masquerade and verdict as the kernel's trace shows them."""
    fates: dict[int, KernelFate] = {}
    for lines in groups.values():
        sport = None
        for line in lines:
            m = re.search(r"\b(?:tcp|udp|sctp) sport (\d+)", line)
            if m and "packet:" in line:
                sport = int(m.group(1))
                break
        if sport is None:
            continue
        fate = fates.setdefault(sport, KernelFate(sport))
        fate.lines.extend(lines)
        first_dst = None
        for line in lines:
            # the packet as each hook sees it: after DNAT its destination has changed (used when the
            # trace lacks the dnat rule's own line, which nft monitor sometimes omits)
            p = re.search(r"packet: .*?ip6? daddr (\S+) .*?(?:tcp|udp|sctp) dport (\d+)", line)
            if p:
                here = f"[{p.group(1)}]:{p.group(2)}" if ":" in p.group(1) else f"{p.group(1)}:{p.group(2)}"
                if first_dst is None:
                    first_dst = here
                elif here != first_dst and fate.dnat_to is None:
                    fate.dnat_to = here
                    fate.dnat_chain = "(from the packet)"
            m = re.match(r"ip6? (\S+) (\S+) rule (.*)\(verdict (\w+)", line)
            if not m:
                continue
            table, chain, rule, verdict = m.groups()
            if "dnat to" in rule:
                fate.dnat_chain = chain
                d = re.search(r"dnat (?:ip6? )?to (\S+)", rule)
                fate.dnat_to = d.group(1) if d else None
            if " masquerade" in f" {rule}" and verdict == "accept":
                fate.masquerade = True
            if verdict == "drop":
                fate.verdict = "reject" if "reject" in rule else "drop"
    return fates


class Sends(list):
    """The test packets of an oracle run: (origin, packet), each with its own source port (the kernel's trace is
    matched to kpdiag's by it)."""

    def __init__(self, first_sport: int = 41000):
        super().__init__()
        self.sport = first_sport

    def add(self, origin: str, src: str, dst: str, dport: int, proto: str = "tcp", repeat: int = 1) -> None:
        for _ in range(repeat):
            self.append((origin, dict(src=src, dst=dst, dport=dport, proto=proto, sport=self.sport)))
            self.sport += 1

    def of(self, origin: str) -> list[dict]:
        return [p for o, p in self if o == origin]


def kernel_walk(lines: list[str]) -> list[tuple[str, str]]:
    """(table, chain) of every rule the kernel's trace reports (IPv4 or IPv6), our own trace table left out."""
    out = []
    for line in lines:
        m = re.match(r"ip6? (\S+) (\S+) rule ", line)
        if m and m.group(1) != TRACE_TABLE:
            out.append((m.group(1), m.group(2)))
    return out


def subsequence(kernel: list, ours: list) -> bool:
    """Every rule the kernel reports, in order, is on kpdiag's path (nft monitor trace may omit some)."""
    it = iter(ours)
    return bool(kernel) and all(any(c == o for o in it) for c in kernel)


def send_packets(lab: Lab, role: str, packets: list[dict], wait: float = 0.2) -> None:
    """Send raw first packets (TCP SYN / UDP) from namespace ``role`` with scapy (layer 3)."""
    script = (
        "import json,sys,time\n"
        "from scapy.all import IP, IPv6, TCP, UDP, Raw, send, conf\n"
        "conf.verb = 0\n"
        "for p in json.loads(sys.argv[1]):\n"
        "    l4 = TCP(sport=p['sport'], dport=p['dport'], flags='S') if p['proto'] == 'tcp' else UDP(sport=p['sport'], dport=p['dport'])/Raw(b'kpdiag')\n"
        "    l3 = IPv6(src=p['src'], dst=p['dst']) if ':' in p['dst'] else IP(src=p['src'], dst=p['dst'])\n"
        "    send(l3/l4)\n"
        f"    time.sleep({wait})\n"
    )
    lab.sh(role, [sys.executable, "-c", script, json.dumps(packets)], timeout=300)


def connect_from(lab: Lab, role: str, packets: list[dict]) -> None:
    """Open connections with ordinary sockets (so the node's OUTPUT hook sees them)."""
    script = (
        "import json,socket,sys\n"
        "for p in json.loads(sys.argv[1]):\n"
        "    kind = socket.SOCK_STREAM if p['proto'] == 'tcp' else socket.SOCK_DGRAM\n"
        "    s = socket.socket(socket.AF_INET6 if ':' in p['dst'] else socket.AF_INET, kind)\n"
        "    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "    s.settimeout(0.3)\n"
        "    s.bind((p.get('bind', '::' if ':' in p['dst'] else '0.0.0.0'), p['sport']))\n"
        "    try:\n"
        "        s.connect((p['dst'], p['dport']))\n"
        "        if kind == socket.SOCK_DGRAM: s.send(b'kpdiag')\n"
        "    except OSError: pass\n"
        "    s.close()\n"
    )
    lab.sh(role, [sys.executable, "-c", script, json.dumps(packets)], timeout=300)

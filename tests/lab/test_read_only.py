"""kpdiag is read-only on the host: the node namespace's full state is identical before and after
`kpdiag node`, `collect`, `trace`, `svc` (with probes) and `node --preflight` ran in it."""

import re
import shutil
import sys

import pytest

from tests.synth import Endpoint, Port, Service, iptables_ruleset
from tests import k8sobjects as k8s

from .netlab import KubeNodeLab
from .test_svc_ttl import _start_api

pytestmark = pytest.mark.lab

VOLATILE_SYSCTL = re.compile(
    r"^(net\.netfilter\.nf_conntrack_count|net\.ipv4\.route\.gc_|net\.ipv6\.route\.gc_|.*\.stable_secret|fs\.|kernel\.random)"
)


def snapshot(lab) -> dict[str, str]:
    def sh(*argv):
        p = lab.sh("node", list(argv), check=False)
        return p.stdout + p.stderr

    strip_counters = lambda t: re.sub(r"\[\d+:\d+\]", "[]", re.sub(r"counter packets \d+ bytes \d+", "counter", t))  # noqa: E731
    no_comments = lambda t: "\n".join(line for line in t.splitlines() if not line.startswith("#"))  # noqa: E731
    snap = {
        "iptables-nft": no_comments(strip_counters(sh("iptables-nft-save"))),
        "iptables-legacy": no_comments(strip_counters(sh("iptables-legacy-save"))),
        "nft": strip_counters(sh("nft", "list", "ruleset")),
        "ipset": sh("ipset", "save"),
        "routes": sh("ip", "route", "show", "table", "all"),
        "rules": sh("ip", "rule"),
        "addresses": sh("ip", "addr"),
        "links": re.sub(r"\b\w*_timer\s+[\d.]+", "timer", sh("ip", "-d", "link")),  # bridge timers tick on their own
        # the namespace's own settings (net.*); kernel-wide counters such as ns_last_pid move on their own
        "sysctl": "\n".join(
            line
            for line in sh("sysctl", "-a").splitlines()
            if line.startswith("net.") and not VOLATILE_SYSCTL.match(line)
        ),
    }
    return snap


def test_nothing_changes_on_the_node(lab, tmp_path):
    k = KubeNodeLab.build(lab, pod_count=2)
    lab.route("node", "default", "via", k.client_ip)
    ips = list(k.pods.values())
    k.load_iptables(
        iptables_ruleset([Service("shop", "web", "10.96.0.20", [Port("http", 80, 8080)], [Endpoint(ip) for ip in ips])])
    )
    lab.sysctl("node", "net.ipv4.ip_forward", "0")  # something for kpdiag to find
    for key in ("net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6"):
        lab.sysctl("node", key, "1")  # IPv6 link-local addresses appear on their own (DAD): not kpdiag's doing
    kc = _start_api(
        lab,
        "node",
        [
            k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"}),
            k8s.endpointslice(
                "shop", "web", [(ip, True, "lab-node", f"web-{i}") for i, ip in enumerate(ips)], [("http", 8080, "TCP")]
            ),
        ],
        tmp_path,
    )
    import time

    time.sleep(1.0)
    before = snapshot(lab)
    exe = shutil.which("kpdiag")
    base = [exe] if exe else [sys.executable, "-m", "kpdiag"]
    runs = [
        ["node", "-o", "json", "--host-root", "/"],
        ["node", "--preflight", "ipvs", "-o", "json", "--host-root", "/"],
        ["node", "--preflight", "nftables", "-o", "json", "--host-root", "/"],
        ["collect", "-o", str(tmp_path / "bundle.tar.gz"), "--host-root", "/"],
        [
            "trace",
            "--bundle",
            str(tmp_path / "bundle.tar.gz"),
            "--src",
            "10.244.1.10",
            "--dst",
            "10.96.0.20",
            "--dport",
            "80",
        ],
        ["svc", "web", "-n", "shop", "--kubeconfig", kc, "-o", "json", "--host-root", "/"],
    ]
    for args in runs:
        proc = lab.sh("node", base + args, check=False, timeout=180)
        assert "Traceback" not in proc.stderr, (args, proc.stderr)
        # a trace answers with the packet's fate: with ip_forward = 0 the pod's packet is dropped (exit 4)
        ok = (0, 1, 4, 5) if args[0] == "trace" else (0, 1)
        assert proc.returncode in ok, (args, proc.returncode, proc.stderr[-500:])
    after = snapshot(lab)
    for key in before:
        assert before[key] == after[key], f"{key} changed"


# the children that must outlive one call (no timeout= to give), each with what bounds it instead
LONG_LIVED = {
    "kpdiag/trace/kernel.py": "trace --kernel's nft -i and nft monitor trace: every read has the trace's DEADLINE, "
    "KernelTrace.close kills both on every exit path, and both die with kpdiag (PR_SET_PDEATHSIG)",
    "kpdiag/collect/child.py": "the collectors' one Popen: child.run waits for it within its timeout and env (keyword "
    "arguments without a default), and kills its process group on the bound, an exception or a signal",
}


def test_no_shell_and_every_command_bounded():
    """Every external command: an argument list, a timeout, a minimal environment (read from the source)."""
    import ast
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2] / "kpdiag"
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", "") in ("run", "Popen", "call", "check_output", "check_call")
                and getattr(getattr(node.func, "value", None), "id", "") == "subprocess"
            ):
                kw = {k.arg: k.value for k in node.keywords}
                assert "shell" not in kw or getattr(kw["shell"], "value", True) is False, (
                    f"{path}:{node.lineno} uses a shell"
                )
                long_lived = node.func.attr == "Popen" and path.relative_to(root.parent).as_posix() in LONG_LIVED
                assert "timeout" in kw or long_lived, f"{path}:{node.lineno} has no timeout"
                assert "env" in kw, f"{path}:{node.lineno} does not set a minimal environment"

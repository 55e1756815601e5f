"""`kpdiag node --preflight ipvs` before the switch: what the kernel can load, not only what is loaded (KP301), and
ipset working rather than kube-proxy's sets, which it has not made yet (KP308). The IPVS kernel lab (tests/ipvsvm)
shows the same on Debian's kernel with its IPVS modules removed."""

from __future__ import annotations

import os
import shutil

from kpdiag.bundle.store import Bundle
from kpdiag.commands.diagnose import analyze_state
from kpdiag.state.node import NodeState
from tests.conftest import FIXTURES

AVAILABLE_WITH_IPVS = """kernel/net/netfilter/ipvs/ip_vs.ko
kernel/net/netfilter/ipvs/ip_vs_rr.ko
kernel/net/netfilter/ipvs/ip_vs_wrr.ko.xz
kernel/net/netfilter/ipvs/ip_vs_sh.ko.zst
kernel/net/netfilter/nf_conntrack.ko
kernel/net/netfilter/ipset/ip_set.ko
"""
AVAILABLE_WITHOUT_IPVS = """kernel/net/netfilter/nf_conntrack.ko
kernel/net/netfilter/ipset/ip_set.ko
kernel/net/bridge/br_netfilter.ko
"""


def _preflight(tmp_path, files: dict[str, str | None]):
    out = tmp_path / "node"
    shutil.copytree(os.path.join(FIXTURES, "healthy-iptables"), out)
    for rel, text in files.items():
        if text is None:
            (out / rel).unlink(missing_ok=True)
        else:
            (out / rel).write_text(text)
    state = NodeState(Bundle.open(str(out)), preflight="ipvs")
    return analyze_state(state, ("KP301", "KP308"), (), subject=None)


def _finding(report, check_id):
    return [f for f in report.findings if f.id == check_id]


def test_modules_the_kernel_cannot_load_get_no_modprobe_advice(tmp_path):
    report = _preflight(tmp_path, {"node/modules-available.txt": AVAILABLE_WITHOUT_IPVS})
    (f,) = _finding(report, "KP301")
    assert "cannot work on this kernel" in f.summary and "ip_vs" in f.summary
    assert not any("modprobe" in s["text"] for s in f.fix_steps() if s["kind"] == "command"), f.fix
    assert any("node/modules-available.txt" in e.source for e in f.evidence)


def test_modules_the_kernel_can_load_are_only_not_loaded(tmp_path):
    report = _preflight(tmp_path, {"node/modules-available.txt": AVAILABLE_WITH_IPVS})
    (f,) = _finding(report, "KP301")
    assert "not loaded" in f.summary and "cannot work" not in f.summary
    assert any("modprobe" in s["text"] or "modules-load" in s["text"] for s in f.fix_steps())


def test_without_the_list_of_loadable_modules_nothing_is_claimed_about_it(tmp_path):
    report = _preflight(tmp_path, {"node/modules-available.txt": None})
    (f,) = _finding(report, "KP301")
    assert "not loaded" in f.summary and "cannot work" not in f.summary


def test_preflight_needs_ipset_working_not_kube_proxys_sets(tmp_path):
    report = _preflight(tmp_path, {"node/ipset.txt": ""})  # ipset answered: no set yet, as before any switch
    assert not _finding(report, "KP308")
    report = _preflight(tmp_path / "b", {"node/ipset.txt": None})  # ipset could not be read at all
    (f,) = _finding(report, "KP308")
    assert "needs ipset" in f.summary


def test_preflight_ip_set_on_disk_but_not_loaded_is_enough(tmp_path):
    """The collector does not run ipset while ip_set is unloaded (it would load it); before the switch that is fine
    when the kernel has the module: kube-proxy's first ipset command loads it (seen on Debian's kernel, tests/ipvsvm)."""
    errors = [{"source": "node/ipset.txt", "error": "the ip_set kernel module is not loaded: no ipsets on this node"}]
    out = tmp_path / "node"
    shutil.copytree(os.path.join(FIXTURES, "healthy-iptables"), out)
    (out / "node" / "ipset.txt").unlink(missing_ok=True)
    import json

    m = json.loads((out / "kpdiag.json").read_text())
    m["errors"] = errors
    (out / "kpdiag.json").write_text(json.dumps(m))
    (out / "node" / "modules-available.txt").write_text(AVAILABLE_WITH_IPVS)
    report = analyze_state(NodeState(Bundle.open(str(out)), preflight="ipvs"), ("KP308",), (), subject=None)
    assert not _finding(report, "KP308")
    (out / "node" / "modules-available.txt").write_text("kernel/net/netfilter/nf_conntrack.ko\n")
    report = analyze_state(NodeState(Bundle.open(str(out)), preflight="ipvs"), ("KP308",), (), subject=None)
    (f,) = _finding(report, "KP308")
    assert "needs ipset" in f.summary

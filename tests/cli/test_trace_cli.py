import json
import os
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from kpdiag.cli import cli, main
from tests.conftest import FIXTURES

RULES = os.path.join("conformance", "kube-proxy-iptables", "rules.saved.txt")


def run(args):
    """Run through main() (the one place exit codes are decided), capturing output."""
    runner = CliRunner()
    result = runner.invoke(cli, args, standalone_mode=False, catch_exceptions=False)
    return result


def test_trace_json_schema_and_probabilities(shared_dir):
    rules = os.path.join(shared_dir, RULES)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kpdiag.cli",
            "trace",
            "--rules",
            rules,
            "--src",
            "10.0.0.2",
            "--dst",
            "172.30.0.44",
            "--dport",
            "80",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["schema"] == "kpdiag.trace/v1" and data["mode"] == "iptables"
    assert data["packet"] == {
        "src": "10.0.0.2",
        "dst": "172.30.0.44",
        "proto": "tcp",
        "dport": 80,
        "sport": 40000,
        "from": "external",
        "iif": None,
    }
    assert sorted(p["dnat"] for p in data["paths"]) == ["10.180.0.4:80", "10.180.0.5:80"]
    assert sum(p["probability"] for p in data["paths"]) == pytest.approx(1.0)
    step = data["paths"][0]["steps"][1]
    assert set(step) >= {"table", "chain", "rule", "text", "action"}
    assert step["chain"] == "KUBE-SERVICES" and step["action"].startswith("jump KUBE-SVC-")
    assert data["rules_evaluated"] > 0


def test_trace_text_and_dot_on_bundle():
    bundle = os.path.join(FIXTURES, "no-endpoints")
    r = run(["trace", "--bundle", bundle, "--src", "192.168.50.2", "--dst", "10.96.0.30", "--dport", "80"])
    assert "REJECT (icmp-port-unreachable)" in r.output
    assert "shop/cart:http has no endpoints" in r.output
    r = run(["trace", "--bundle", bundle, "--src", "192.168.50.2", "--dst", "10.96.0.20", "--dport", "80", "-o", "dot"])
    assert r.output.startswith("digraph") and "33.3%" in r.output and "KUBE-SVC-" in r.output


def test_from_node_uses_bundle_address():
    bundle = os.path.join(FIXTURES, "healthy-iptables")
    r = run(["trace", "--bundle", bundle, "--from", "node", "--dst", "10.96.0.20", "--dport", "80", "-o", "json"])
    data = json.loads(r.output)
    assert data["packet"]["src"] != "127.0.0.1" and data["paths"][0]["steps"][0]["hook"] == "OUTPUT"


@pytest.mark.parametrize(
    "content,where",
    [
        (b"*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -j ACCEPT\n", ":3: truncated"),
        (
            b'*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -m comment --comment "x -j ACCEPT\nCOMMIT\n',
            ":3: unbalanced quote",
        ),
        (b"*weird\nCOMMIT\n", ":1: unknown table"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", ":1: not text"),
    ],
)
def test_bad_rules_one_line_exit_3(tmp_path, content, where):
    f = tmp_path / "rules.txt"
    f.write_bytes(content)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kpdiag.cli",
            "trace",
            "--rules",
            str(f),
            "--src",
            "1.1.1.1",
            "--dst",
            "2.2.2.2",
            "--dport",
            "80",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 3
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].startswith("kpdiag: error: ") and f"{f}{where}" in lines[0]


def test_missing_file_permission_and_usage(tmp_path):
    assert (
        main(["trace", "--rules", str(tmp_path / "nope.txt"), "--src", "1.1.1.1", "--dst", "2.2.2.2", "--dport", "1"])
        == 3
    )
    assert main(["trace", "--dst", "2.2.2.2"]) == 2  # neither --rules nor --bundle
    rules = tmp_path / "r.txt"
    rules.write_text("*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n")
    assert main(["trace", "--rules", str(rules), "--src", "1.1.1.1", "--dst", "2.2.2.2"]) == 2  # tcp without --dport
    assert main(["trace", "--rules", str(rules), "--src", "nonsense", "--dst", "2.2.2.2", "--dport", "1"]) == 2
    assert main(["trace", "--bundle", str(tmp_path), "--src", "1.1.1.1", "--dst", "2.2.2.2", "--dport", "1"]) == 3


def test_bundle_with_broken_side_files_still_traces(tmp_path):
    b = tmp_path / "b"
    shutil.copytree(os.path.join(FIXTURES, "healthy-iptables"), b)
    (b / "node" / "ip-addr.json").write_text("{not json")
    (b / "node" / "ipset.txt").write_text("bogus line\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kpdiag.cli",
            "trace",
            "--bundle",
            str(b),
            "--src",
            "192.168.50.2",
            "--dst",
            "10.96.0.20",
            "--dport",
            "80",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0
    assert "ip-addr.json:1: invalid JSON" in proc.stderr and "ipset.txt:1: unexpected line" in proc.stderr
    assert len(json.loads(proc.stdout)["paths"]) == 3


def test_version_and_console_scripts():
    exe = shutil.which("kpdiag")
    assert exe, "console script kpdiag not installed"
    out = subprocess.run([exe, "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and "kpdiag, version 0.1.0" in out.stdout
    assert shutil.which("kubectl-kpdiag")

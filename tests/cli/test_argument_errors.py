"""Every command judges its arguments before it collects, asks the API or sends anything: a bad argument is exit 2
and one short line on stderr — never minutes of collecting the live node first (nor a failure of that collection
on a machine without iptables). The collecting entry points are replaced by ones that fail the test if reached."""

import os

import pytest

from kpdiag.cli import main
from tests.conftest import FIXTURES

REACHED = []


def _tripwire(name):
    def reached(*args, **kwargs):
        REACHED.append(name)
        raise AssertionError(f"{name} reached before the arguments were judged")

    return reached


@pytest.fixture(autouse=True)
def no_collection(monkeypatch):
    import kpdiag.collect.node
    import kpdiag.commands.pipeline
    import kpdiag.commands.policy
    import kpdiag.commands.svc
    import kpdiag.fleet.cluster_cmd
    import kpdiag.commands.trace

    REACHED.clear()
    for mod, name in (
        (kpdiag.commands.pipeline, "diagnose_node"),
        (kpdiag.commands.pipeline, "analyze_bundle"),
        (kpdiag.commands.trace, "setup_trace"),
        (kpdiag.collect.node, "collect_node"),
        (kpdiag.commands.svc, "diagnose_service"),
        (kpdiag.fleet.cluster_cmd, "run"),
        (kpdiag.commands.policy, "collect_live"),
    ):
        monkeypatch.setattr(mod, name, _tripwire(f"{mod.__name__}.{name}"))
    yield


BAD = {
    "trace": [
        ["trace", "--dst", "2.2.2.2", "--src", "1.1.1.1"],  # tcp without a port: live, on a host with no iptables
        ["trace", "--dst", "2.2.2.2:80"],  # no --src, not --from node
        ["trace", "--dst", "2.2.2.2:80", "--src", "::1"],  # two IP versions
        ["trace", "--dst", "2.2.2.2:80", "--dport", "81", "--src", "1.1.1.1"],
        ["trace", "--dst", "2.2.2.2:80", "--src", "1.1.1.1", "--sport", "70000"],
        ["trace", "--dst", "nonsense", "--src", "1.1.1.1"],
        ["trace", "--rules", "a", "--bundle", "b", "--dst", "2.2.2.2:80", "--src", "1.1.1.1"],
        ["trace", "--rules", "a", "--all-rules", "--dst", "2.2.2.2:80", "--src", "1.1.1.1"],  # --all-rules: live only
        ["trace", "--dst", "2.2.2.2:80", "--src", "1.1.1.1", "--proto", "icmp"],  # ICMP has no port
        ["trace", "--dst", "2.2.2.2", "--dport", "80", "--src", "1.1.1.1", "--proto", "icmp"],
    ],
    "node": [
        ["node", "--service", "web"],
        ["node", "--trace", "10.0.0.1"],
        ["node", "--select", "KP9999"],
        ["node", "--all-rules"],
    ],
    "analyze": [["analyze"], ["analyze", os.path.join(FIXTURES, "ip-forward-off"), "--ignore", "nosuchcheck"]],
    "svc": [
        ["svc", "Web_1"],
        ["svc", "web", "-n", "Shop!"],
        ["svc", "web", "--from", "noslash"],
        ["svc", "web", "--save", "out.zip"],
    ],
    "policy": [
        ["policy", "--from", "x", "--to", "a/b", "--port", "80"],
        ["policy", "--from", "a/b", "--to", "c/d", "--port", "99999"],
        ["policy", "--from", "a/b", "--to", "c/d", "--port", "80", "--bundle", "b", "--context", "c"],
    ],
    "collect": [["collect", "-o", "out.zip"], ["collect", "-o", "/nonexistent-dir/b"], ["collect"]],
    "cluster": [
        ["cluster", "--service", "web"],
        ["cluster", "--image", "bad image"],
        ["cluster", "--parallel", "0"],
        ["cluster", "--save-dir", "/nonexistent-dir/run"],
    ],
    "redact": [["redact", os.path.join(FIXTURES, "ip-forward-off"), "-o", FIXTURES], ["redact", "x"]],
    "checks": [["checks", "-o", "xml"]],
    "rbac": [["rbac", "nope"]],
    "explain": [["explain", "KP9999"], ["explain"]],
    "completion": [["completion", "tcsh"], ["completion", "install", "--shell", "tcsh"]],
}


def test_every_command_is_covered():
    from kpdiag.cli import cli

    assert set(BAD) == set(cli.commands), set(cli.commands) ^ set(BAD)


@pytest.mark.parametrize(
    "argv", [argv for cases in BAD.values() for argv in cases], ids=lambda a: " ".join(a)[:60].replace("/", "_")
)
def test_argument_error_is_exit_2_and_one_short_line_before_any_collection(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (argv, code, out[-500:], err[-500:])
    assert REACHED == [], REACHED
    assert out == "", out[-500:]
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kpdiag: error: ") and len(lines[0]) <= 200, err


def test_plain_kpdiag_prints_help_and_succeeds(capsys):
    assert main([]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("Usage: ") and "Commands:" in out and err == ""

"""``-o yaml`` wherever ``-o json`` is: the same document (yaml.safe_load(yaml) == json.loads(json)), through the real
command line, for every kind of document kpdiag prints; terminal-safe; and ``kpdiag --help`` does not load PyYAML."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import click
import pytest
import yaml

from tests import k8sobjects as k8s
from tests.apiserver import ApiServer
from tests.conftest import FIXTURES
from tests.given import fixture_report

KPDIAG = [sys.executable, "-m", "kpdiag"]


def _both(*args: str, ok=(0, 1, 3, 4, 5)) -> tuple[object, object, str]:
    """The JSON and the YAML document of one command, and the YAML text."""
    out = {}
    for fmt in ("json", "yaml"):
        proc = subprocess.run([*KPDIAG, *args, "-o", fmt], capture_output=True, text=True, timeout=180)
        assert proc.returncode in ok, (args, fmt, proc.returncode, proc.stderr)
        assert "Traceback" not in proc.stderr and proc.stdout, (args, fmt, proc.stderr)
        out[fmt] = proc.stdout
    return json.loads(out["json"]), yaml.safe_load(out["yaml"]), out["yaml"]


@pytest.mark.parametrize(
    "args",
    [
        ("analyze", f"{FIXTURES}/healthy-iptables"),
        ("analyze", f"{FIXTURES}/netpol-ingress-denied"),
        ("analyze", f"{FIXTURES}/cluster-fleet-drift"),  # a directory of node reports: the cluster report
        ("checks",),
        ("trace", "--bundle", f"{FIXTURES}/healthy-iptables", "--from", "pod", "--src", "10.244.1.10"),
        ("policy", "--bundle", f"{FIXTURES}/netpol-ingress-denied", "--from", "debug/client", "--to", "shop/web"),
    ],
    ids=["node-report", "netpol-report", "cluster-report", "catalogue", "trace", "policy"],
)
def test_yaml_is_the_json_document(args):
    if args[0] == "trace":
        args = (*args, "--dst", "10.96.0.20:80")
    if args[0] == "policy":
        args = (*args, "--port", "80")
    as_json, as_yaml, text = _both(*args)
    assert as_yaml == as_json
    assert not text.lstrip().startswith(("{", "[")), "block YAML, not JSON (which is YAML too)"


def test_svc_yaml_is_the_json_document(tmp_path):
    objs = [
        k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"}),
        k8s.pod("shop", "web-1", "10.244.1.11", {"app": "web"}, ports=[{"name": "http", "containerPort": 8080}]),
    ]
    with ApiServer(objs) as api:
        kc = api.kubeconfig(tmp_path)
        as_json, as_yaml, _ = _both("svc", "web", "-n", "shop", "--kubeconfig", kc, "--no-probe")
    as_json["extra"].pop("elapsed", None), as_yaml["extra"].pop("elapsed", None)  # two runs: their own timings
    assert as_yaml == as_json
    assert as_json["subject"] == "service shop/web"


def test_every_report_fixture_as_yaml_is_its_json():
    """Every fixture's report, converted: YAML's own words (yes, no, on, 1e3, 2026-01-01, ~, '') stay strings."""
    from kpdiag.render.report import report_to_json
    from kpdiag.render.yamlout import json_to_yaml

    names = sorted(n for n in os.listdir(FIXTURES) if os.path.isdir(os.path.join(FIXTURES, n)))
    assert len(names) > 100
    for name in names:
        report = fixture_report(name)
        text = report_to_json(report)
        assert yaml.safe_load(json_to_yaml(text)) == json.loads(text), name


def test_yaml_words_and_hostile_strings_survive_and_are_escaped():
    from kpdiag.render.yamlout import json_to_yaml

    doc = {
        "words": ["yes", "no", "on", "off", "null", "~", "", "1e3", "0x1F", "010", "2026-12-07", "1:30", "- a", "#"],
        "hostile": "a\x1b[31mred\x1b[0m\u202eevil\u200b\nnext: line\r\x00",
        "ünïcode": "naïve — ok",
        "numbers": [0, -1, 1.5, 10**20, True, False, None],
        "nested": {"empty": {}, "list": []},
    }
    text = json.dumps(doc)
    got = json_to_yaml(text)
    assert yaml.safe_load(got) == doc
    for bad in ("\x1b", "\u202e", "\u200b", "\r", "\x00", "ü", "—"):
        assert bad not in got, repr(bad)
    assert "next: line" not in got.replace("\\nnext: line", "")  # the newline is an escape, not a new key's line


def test_every_command_with_json_output_has_yaml():
    from kpdiag.cli import cli

    with_json = []
    for name, command in cli.commands.items():
        for param in command.params:
            if isinstance(param, click.Option) and "--output" in param.opts and isinstance(param.type, click.Choice):
                if "json" in param.type.choices:
                    with_json.append(name)
                    assert "yaml" in param.type.choices, f"kpdiag {name}: -o json but no -o yaml"
    assert {"analyze", "node", "svc", "cluster", "trace", "policy", "checks"} <= set(with_json), with_json


def test_help_loads_no_yaml_nor_heavy_library():
    code = (
        "import sys\n"
        "from kpdiag.cli import main\n"
        "main(['--help']); main(['svc', '--help']); main(['analyze', '--help'])\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'yaml', 'kubernetes', 'scapy', 'pyroute2'})\n"
        "print('HEAVY', heavy)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "HEAVY []" in proc.stdout, proc.stdout[-300:] + proc.stderr

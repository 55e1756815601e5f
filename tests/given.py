"""``given(...)``: an in-memory bundle — a small healthy node plus the files a case changes — and one check run on it.

    def test_forwarding_off_is_an_error():
        (f,) = given(sysctl="net.ipv4.ip_forward = 0").fires("KP501")
        assert "net.ipv4.ip_forward = 0" in f.summary

The base is the recorded fixture ``fixtures/healthy-iptables`` (a real kernel's iptables, addresses, routes and
sysctls; kube-proxy's files), read once and never copied: a case names only what it changes, by source:

- ``sysctl``: ``"key = value"`` lines (or a dict) replacing those keys, the others kept;
- ``kube_proxy``: top-level KubeProxyConfiguration keys replaced (``{"clusterCIDR": "10.244.0.0/16"}``; None unsets);
- ``iptables``: the text of ``iptables-save`` (node/iptables-save.txt, the file the rules are read from);
- ``nodes``, ``services``, ``endpointslices``, ``pods``: API objects (a List is written as kubectl prints it);
  ``node(name, *pod_cidrs)`` builds a Node;
- ``processes``: ``{pid: name}`` (node/processes.txt);
- ``files``: any source by its path (text, bytes, or JSON values; None removes the file);
- ``drop``: path prefixes removed from the base (``drop=("cluster/",)``: no API objects);
- ``manifest``: keys of kpdiag.json.

Nothing is written to disk and nothing needs root. Recorded bundles stay for what needs a kernel (traces, rules
kube-proxy wrote in a lab): ``given`` changes files, it does not re-record them — an iptables text written here is
read by the same parser, not checked by a kernel.

``.run(ID)`` runs that one check through the real runner (its inputs view, its skip reasons) and returns an
:class:`Outcome`; ``.fires(ID)`` / ``.silent(ID)`` / ``.skips(ID)`` assert the outcome and return the findings or the
reason. ``tests/checks/test_fixtures.py`` counts ``.fires("KPnnn")`` and ``.silent("KPnnn")`` in tests/checks as a
case where that check fires or stays silent, as it counts fixtures.
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass

from kpdiag.bundle import sources
from kpdiag.bundle.store import MANIFEST, Bundle
from kpdiag.checkapi import load_registry, run_checks
from kpdiag.state.node import NodeState
from tests.conftest import FIXTURES

BASE = "healthy-iptables"


@functools.lru_cache(maxsize=None)
def base_files(name: str = BASE) -> dict[str, bytes]:
    """The base bundle's files by path (scenario.json is the fixture's expectation, not a bundle file)."""
    root = os.path.join(FIXTURES, name)
    out = {}
    for folder, _dirs, names in os.walk(root):
        for n in names:
            rel = os.path.relpath(os.path.join(folder, n), root).replace(os.sep, "/")
            if rel != "scenario.json":
                with open(os.path.join(folder, n), "rb") as fh:
                    out[rel] = fh.read()
    return out


@functools.lru_cache(maxsize=None)
def fixture_report(name: str):
    """The report of ``fixtures/NAME`` (a bundle, or a directory of node reports), made once per test process: the
    tests that judge every fixture's report share it (a Report is frozen; do not change what it holds)."""
    from kpdiag.commands.pipeline import analyze_bundle
    from kpdiag.fleet.aggregate import aggregate_dir, looks_like_report_dir

    path = os.path.join(FIXTURES, name)
    return aggregate_dir(path) if looks_like_report_dir(path) else analyze_bundle(path)


def node(name: str, *pod_cidrs: str, **spec) -> dict:
    """A Node as the API returns it, with its pod CIDRs (``spec.podCIDRs`` and the legacy ``spec.podCIDR``)."""
    s = {"podCIDR": pod_cidrs[0], "podCIDRs": list(pod_cidrs)} if pod_cidrs else {}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {**s, **spec}}


def _list(items) -> bytes:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(items)}, indent=1).encode()


def _sysctl(text: str, change) -> str:
    if isinstance(change, str):
        change = dict(line.split("=", 1) for line in change.strip().splitlines() if "=" in line)
    change = {k.strip(): str(v).strip() for k, v in change.items()}
    out, seen = [], set()
    for line in text.splitlines():
        key = line.split("=", 1)[0].strip()
        if key in change:
            seen.add(key)
            if change[key] == "None":
                continue
            line = f"{key} = {change[key]}"
        out.append(line)
    out += [f"{k} = {v}" for k, v in change.items() if k not in seen and v != "None"]
    return "\n".join(out) + "\n"


def _kube_proxy(text: str, change: dict) -> str:
    for key, value in change.items():
        pattern = re.compile(rf"^{re.escape(key)}:.*$", re.M)
        line = "" if value is None else f"{key}: {json.dumps(value)}"
        if pattern.search(text):
            text = pattern.sub(line, text, count=1)
        elif line:
            text = text.rstrip("\n") + f"\n{line}\n"
    return text


def _bytes(value) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, indent=1).encode()


@dataclass(frozen=True)
class Outcome:
    status: str  # ran, skipped, error
    reason: str | None
    findings: tuple

    @property
    def ids(self) -> set[str]:
        return {f.id for f in self.findings}


class Given:
    def __init__(self, files: dict[str, bytes], preflight: str | None = None, focus=None):
        self.files = files
        self.preflight, self.focus = preflight, focus

    def state(self) -> NodeState:
        manifest = json.loads(self.files.get(MANIFEST, b"{}"))
        bundle = Bundle.from_files(manifest.get("node") or "given", dict(self.files))
        return NodeState(bundle, focus=self.focus, preflight=self.preflight)

    def run(self, check_id: str) -> Outcome:
        spec = load_registry(plugins=False).get(check_id)
        assert spec is not None, f"no check {check_id}"
        findings, runs = run_checks(self.state(), [spec])
        (r,) = runs
        return Outcome(r.status, r.reason, tuple(f for f in findings if f.id == spec.id))

    def fires(self, check_id: str) -> tuple:
        out = self.run(check_id)
        assert out.status == "ran" and out.findings, (check_id, out)
        return out.findings

    def silent(self, check_id: str) -> None:
        out = self.run(check_id)
        assert out.status == "ran" and not out.findings, (check_id, out)

    def skips(self, check_id: str) -> str:
        out = self.run(check_id)
        assert out.status == "skipped" and out.reason, (check_id, out)
        return out.reason


def given(
    *,
    base: str = BASE,
    sysctl=None,
    kube_proxy: dict | None = None,
    iptables: str | None = None,
    nodes=None,
    services=None,
    endpointslices=None,
    pods=None,
    processes: dict | None = None,
    files: dict | None = None,
    drop: tuple[str, ...] = (),
    manifest: dict | None = None,
    preflight: str | None = None,
    focus=None,
) -> Given:
    out = {rel: data for rel, data in base_files(base).items() if not rel.startswith(tuple(drop))}
    if sysctl is not None:
        out[sources.SYSCTL] = _sysctl(out.get(sources.SYSCTL, b"").decode(), sysctl).encode()
    if kube_proxy is not None:
        out[sources.KP_CONFIG] = _kube_proxy(out.get(sources.KP_CONFIG, b"").decode(), kube_proxy).encode()
    if iptables is not None:
        out[sources.IPTABLES_SAVE] = iptables.encode()
    for rel, items in (
        (sources.NODES, nodes),
        (sources.SERVICES, services),
        (sources.ENDPOINTSLICES, endpointslices),
        (sources.PODS, pods),
    ):
        if items is not None:
            out[rel] = _list(items)
    if processes is not None:
        out[sources.PROCESSES] = "".join(f"{pid} {name}\n" for pid, name in processes.items()).encode()
    if manifest:
        m = {**json.loads(out.get(MANIFEST, b"{}")), **manifest}
        out[MANIFEST] = json.dumps(m).encode()
    for rel, value in (files or {}).items():
        if value is None:
            out.pop(rel, None)
        else:
            out[rel] = _bytes(value)
    return Given(out, preflight=preflight, focus=focus)


def base_text(rel: str, base: str = BASE) -> str:
    """A base file's text, for cases that edit it (``given(iptables=base_text(IPTABLES_SAVE).replace(...))``)."""
    return base_files(base)[rel].decode()

"""A small cluster for NetworkPolicy tests, modelled on the upstream e2e layout: namespaces x, y, z (labelled
ns=x …), pods a, b, c in each (labelled pod=a …) serving 80 and 81 over TCP and UDP (ports named serve-80-tcp …),
written as a bundle (cluster/*.json as kubectl prints Lists) and asked through the CLI."""

from __future__ import annotations

import contextlib
import io
import json
import os

NAMESPACES = ("x", "y", "z")
PODS = ("a", "b", "c")


def pod_ip(ns: str, pod: str) -> str:
    return f"10.244.{NAMESPACES.index(ns) + 1}.{PODS.index(pod) + 10}"


def namespace(name: str, labels: dict | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **(labels or {})}},
    }


def pod(ns: str, name: str, ip: str, labels: dict, ports=None, host_network: bool = False) -> dict:
    if ports is None:
        ports = [
            {"name": f"serve-{p}-{proto.lower()}", "containerPort": p, "protocol": proto}
            for p in (80, 81)
            for proto in ("TCP", "UDP")
        ]
    spec = {"nodeName": "node-a", "containers": [{"name": "srv", "image": "agnhost", "ports": ports}]}
    if host_network:
        spec["hostNetwork"] = True
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": spec,
        "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]},
    }


def policy(ns: str, name: str, spec: dict) -> dict:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }


def world_objects() -> tuple[list[dict], list[dict]]:
    nss = [namespace(n, {"ns": n}) for n in NAMESPACES]
    pods = [pod(n, p, pod_ip(n, p), {"pod": p}) for n in NAMESPACES for p in PODS]
    return nss, pods


def as_list(items: list[dict]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}, indent=1)


def write_bundle(path, policies: list[dict], namespaces=None, pods=None, extra: dict | None = None) -> str:
    nss, pds = world_objects()
    files = {
        "cluster/namespaces.json": as_list(nss if namespaces is None else namespaces),
        "cluster/pods.json": as_list(pds if pods is None else pods),
        "cluster/networkpolicies.json": as_list(policies),
        "kpdiag.json": json.dumps({"format": "kpdiag-bundle/1", "errors": []}),
    }
    files.update(extra or {})
    for rel, text in files.items():
        full = os.path.join(str(path), rel)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as fh:
            fh.write(text if isinstance(text, str) else json.dumps(text))
    return str(path)


def run_cli(*argv) -> tuple[int, str, str]:
    """kpdiag's own entry point, in this process: (exit code, stdout, stderr)."""
    from kpdiag.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def ask(bundle: str, src: str, dst: str, port: str) -> dict:
    code, out, err = run_cli("policy", "--bundle", bundle, "--from", src, "--to", dst, "--port", port, "-o", "json")
    assert code in (0, 1), (code, err)
    doc = json.loads(out)
    assert code == (0 if doc["allowed"] else 1)
    return doc

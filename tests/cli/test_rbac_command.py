"""The RBAC manifests ship inside the package and `kpdiag rbac NAME` prints them (`kpdiag rbac svc | kubectl apply
-f -`); every message that tells the user to apply RBAC names that command, never a repository file
(deploy/rbac-*.yaml) a `pip install kpdiag` does not have. Through the real command line, and from an installed
wheel."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import pytest
import yaml

from tests.apiserver import ApiServer
from tests.conftest import ROOT

KPDIAG = [sys.executable, "-m", "kpdiag"]
RUNTIME = [os.path.join(ROOT, "kpdiag"), os.path.join(ROOT, "checks")]
NAMED = re.compile(r"kpdiag rbac ((?:[a-z][a-z-]*)(?: [a-z][a-z-]*)*) \| kubectl apply -f -")


def _shipped() -> dict[str, str]:
    from kpdiag.manifests import MANIFESTS

    return {
        name: open(os.path.join(ROOT, "kpdiag", "manifests", filename), encoding="utf-8").read()
        for name, (filename, _) in MANIFESTS.items()
    }


def _strings(path: str):
    """Every string literal of a module but its docstrings (what can reach a user), f-strings' parts joined."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.value
        elif isinstance(node, ast.JoinedStr):
            yield "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)


def _runtime_files():
    for top in RUNTIME:
        for folder, _, names in os.walk(top):
            yield from (os.path.join(folder, n) for n in sorted(names) if n.endswith(".py"))


def test_each_manifest_prints_as_shipped_and_is_rbac():
    shipped = _shipped()
    assert set(shipped) == {"svc", "svc-whoami", "svc-kube-system", "cluster"}
    for name, text in shipped.items():
        proc = subprocess.run([*KPDIAG, "rbac", name], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and proc.stdout == text, name
        kinds = {d["kind"] for d in yaml.safe_load_all(proc.stdout) if d}
        assert kinds & {"Role", "ClusterRole"} and kinds & {"RoleBinding", "ClusterRoleBinding"}, (name, kinds)
        assert any(name in group.split() for group in NAMED.findall(text)), name  # the file says how to apply it
    # the repository's deploy/ names the same files (links), so docs and tests read what ships
    for name, text in shipped.items():
        filename = f"rbac-{name}.yaml"
        assert open(os.path.join(ROOT, "deploy", filename), encoding="utf-8").read() == text


def test_several_names_are_one_stream_and_the_list_and_a_typo():
    proc = subprocess.run([*KPDIAG, "rbac", "svc", "svc-whoami"], capture_output=True, text=True, timeout=60)
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    shipped = _shipped()
    want = [d for n in ("svc", "svc-whoami") for d in yaml.safe_load_all(shipped[n]) if d]
    assert proc.returncode == 0 and docs == want
    listing = subprocess.run([*KPDIAG, "rbac"], capture_output=True, text=True, timeout=60)
    assert listing.returncode == 0 and [ln.split()[0] for ln in listing.stdout.splitlines()] == list(shipped)
    typo = subprocess.run([*KPDIAG, "rbac", "svcs"], capture_output=True, text=True, timeout=60)
    assert typo.returncode == 2 and len(typo.stderr.splitlines()) == 1 and "'svcs'" in typo.stderr


def test_every_message_names_a_manifest_kpdiag_rbac_prints():
    from kpdiag.manifests import MANIFESTS

    named, stale = set(), []
    for path in _runtime_files():
        for text in _strings(path):
            if "deploy/rbac" in text or "kubectl apply -f deploy" in text:
                stale.append((os.path.relpath(path, ROOT), text[:120]))
            for group in NAMED.findall(text):
                named.update(group.split())
        source = open(path, encoding="utf-8").read()
        for call in re.findall(r"apply_command\(([^)]*)\)", source):
            named.update(re.findall(r"['\"]([a-z-]+)['\"]", call))
    assert stale == [], stale
    assert named and named <= set(MANIFESTS), named - set(MANIFESTS)
    assert {"svc", "cluster"} <= named  # the 403 of kpdiag svc, the missing namespace of kpdiag cluster


def test_the_403_headline_of_svc_names_the_command(tmp_path):
    with ApiServer([], fail={"*": 403}) as api:
        proc = subprocess.run(
            [*KPDIAG, "svc", "web", "-n", "shop", "--kubeconfig", api.kubeconfig(tmp_path), "--no-probe"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 3
    assert "kpdiag rbac svc | kubectl apply -f -" in proc.stderr, proc.stderr
    assert "deploy/" not in proc.stderr + proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """kpdiag installed from its wheel into a folder of its own (no repository beside it)."""
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), ROOT],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = out.glob("kpdiag-*.whl")
    target = out / "site"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return target


def test_an_installed_wheel_prints_every_manifest_a_message_names(installed, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(installed))
    where = subprocess.run(
        [sys.executable, "-c", "import kpdiag; print(kpdiag.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert where.stdout.startswith(str(installed)), where.stdout  # the installed copy, not the repository
    for name, text in _shipped().items():
        proc = subprocess.run(
            [sys.executable, "-m", "kpdiag", "rbac", name],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            cwd=tmp_path,
        )
        assert proc.returncode == 0 and proc.stdout == text, (name, proc.stderr)

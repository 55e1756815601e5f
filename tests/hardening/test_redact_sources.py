"""Every documented form (docs/redaction.md), planted in every source of the catalogue — text files, node JSON, and
API objects in every field a real object has (annotations, labels, args, command, env, images, Node
status.images, status messages, ConfigMap data) — and in the manifest and an extra file: after `kpdiag redact`
none of what the spec hides survives anywhere, every JSON file still parses, and the secret forms are gone from a
plain bundle (no --redact) too."""

from __future__ import annotations

import json
import os

import pytest

from kpdiag.bundle import sources
from kpdiag.bundle.redact import redact_files
from kpdiag.bundle.store import write_bundle
from kpdiag.cli import main
from tests.hardening.test_redact_canary import _read_fixture, _tree
from tests.hardening.test_redact_forms import FORMS

BASE = "cluster-nft-consistent"
SECRET_FORMS = [f for f in FORMS if f["after"] and "REDACTED" in f["after"]]
TEXTS = [f["before"] for f in FORMS]
EXTRA = "extra/acme-prod-42 10.77.0.32.txt"


def _api_object(i: int) -> dict:
    """An API object carrying every form in the fields kpdiag's redaction treats differently."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"planted-{i}",
            "namespace": "default",
            "annotations": {f"example.com/form-{n}": t for n, t in enumerate(TEXTS)},
            "labels": {"app": "planted"},
        },
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/payments/api:2.3",
                    "command": TEXTS,
                    "args": [f"--note={t}" for t in TEXTS],
                    "env": [{"name": "NOTE", "value": t} for t in TEXTS],
                }
            ],
            "nodeName": "ip-10-77-0-32.ec2.internal",
            "providerID": "aws:///us-east-1a/i-0abc1234def567890",
        },
        "status": {
            "message": "\n".join(TEXTS),
            "conditions": [{"type": "Ready", "status": "False", "message": t} for t in TEXTS],
            "images": [
                {
                    "names": [
                        "123456789012.dkr.ecr.us-east-1.amazonaws.com/payments/api@sha256:" + "ab" * 32,
                        "gcr.io/acme-prod-42/app:1",
                    ],
                    "sizeBytes": 1000,
                }
            ],
        },
        "data": {f"form-{n}": t for n, t in enumerate(TEXTS)},
    }


def _plant_json(data: bytes | None, api: bool) -> bytes:
    try:
        doc = json.loads(data) if data else None
    except ValueError:
        doc = None
    obj = _api_object(0) if api else {"note": TEXTS, "text": "\n".join(TEXTS)}
    if isinstance(doc, dict) and isinstance(doc.get("items"), list):
        doc["items"].append(obj)
    elif isinstance(doc, dict):
        doc["planted"] = obj
    elif isinstance(doc, list):
        doc.append(obj)
    else:
        doc = {"apiVersion": "v1", "kind": "List", "items": [obj]} if api else [obj]
    return json.dumps(doc, indent=1).encode()


def planted() -> dict[str, bytes]:
    files = _read_fixture(BASE)
    block = ("\n".join(TEXTS) + "\n").encode()
    for src in sources.CATALOGUE.values():
        path = src.path
        if src.kind == "json":
            files[path] = _plant_json(files.get(path), api=path.startswith((sources.CLUSTER, sources.PROBES)))
        else:
            files[path] = files.get(path, b"") + block
    manifest = json.loads(files["kpdiag.json"])
    manifest["errors"] = [{"source": "cluster/version.json", "error": t} for t in TEXTS]
    manifest["node"] = "ip-10-77-0-32.ec2.internal"
    files["kpdiag.json"] = json.dumps(manifest).encode()
    files[EXTRA] = block
    return files


def _survivors(files: dict[str, bytes], forms: list[dict]) -> list[str]:
    out = []
    for rel, data in files.items():
        low = (rel + "\n" + data.decode("utf-8", "replace")).lower()
        for f in forms:
            for h in f["hidden"]:
                if h.lower() in low:
                    i = low.index(h.lower())
                    out.append(f"{rel}: {f['id']}: {h!r} in …{low[max(0, i - 40) : i + 40]!r}")
    return out


def test_every_source_is_planted():
    files = planted()
    for path in sources.CATALOGUE:
        assert all(t.encode() in files[path] or json.dumps(t).encode()[1:-1] in files[path] for t in TEXTS[:3]), path


def test_no_form_survives_in_any_source():
    red, _ = redact_files(planted(), salt="sources")
    leaks = _survivors(red, FORMS)
    assert not leaks, f"{len(leaks)} leaks:\n" + "\n".join(leaks[:40])
    assert set(red) >= set(sources.CATALOGUE)
    for rel, data in red.items():
        if rel.endswith(".json"):
            json.loads(data)


def test_kpdiag_redact_command_leaves_nothing_and_warns_only_for_what_was_not_copied(tmp_path, capsys):
    files = planted()
    manifest = json.loads(files.pop("kpdiag.json"))
    manifest["errors"].append({"source": "node/ipvsadm.txt", "error": "ipvsadm: not found"})
    src = str(tmp_path / "plain")
    write_bundle(files, src, manifest)
    os.symlink("/etc/hostname", os.path.join(src, "node", "link.txt"))
    capsys.readouterr()
    out = str(tmp_path / "red")
    assert main(["redact", src, "-o", out, "--salt", "s"]) == 0
    err = capsys.readouterr().err
    written = _tree(out)
    leaks = _survivors(written, FORMS)
    assert not leaks, f"{len(leaks)} leaks:\n" + "\n".join(leaks[:40])
    warnings = [line for line in err.splitlines() if "warning" in line]
    # the link is there and not copied: one warning; the sources the manifest says were never collected: none
    assert len(warnings) == 1 and "node/link.txt" in warnings[0], err
    assert " 1 names" not in err and " 1 files" not in err


def test_secret_forms_leave_a_plain_bundle_too(tmp_path):
    files = planted()
    manifest = json.loads(files.pop("kpdiag.json"))
    out = str(tmp_path / "plain")
    write_bundle(files, out, manifest)
    leaks = _survivors(_tree(out), SECRET_FORMS)
    assert not leaks, f"{len(leaks)} leaks:\n" + "\n".join(leaks[:40])


@pytest.mark.parametrize("case", ["one-name", "one-address"])
def test_counts_are_plural_only_when_plural(tmp_path, capsys, case):
    src = tmp_path / "b"
    (src / "node").mkdir(parents=True)
    (src / "kpdiag.json").write_text(json.dumps({"format": "kpdiag-bundle/1", "errors": []}))
    text = "host acme-db.example.org\n" if case == "one-name" else "peer 52.18.44.21\n"
    (src / "node" / "processes.txt").write_text(text)
    capsys.readouterr()
    assert main(["redact", str(src), "-o", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert "1 address " in err or "1 name " in err, err
    assert "1 addresses" not in err and "1 names" not in err

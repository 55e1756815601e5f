"""Redaction at its edges. A text that starts inside a PEM block: kpdiag keeps the last 2 MB of kube-proxy's log, so
the cut can fall in the middle of a key or certificate that was logged; what is left of the block (its base64 lines, up
to its END line) is key material and must not reach the bundle, with or without --redact (docs/redaction.md, form
"pem"). A file of API objects that is not JSON cannot have its names told apart: it is left out of a redacted copy."""

from __future__ import annotations

import base64
import os
import random
import subprocess
import sys

from kpdiag.bundle.redact import Redactor
from kpdiag.bundle.scrub import scrub_text
from kpdiag.collect.node_kube_proxy import LOG_MAX_BYTES

END = "-----END RSA PRIVATE KEY-----"


def _pem_lines(seed: int) -> list[str]:
    body = base64.b64encode(random.Random(seed).randbytes(2000)).decode()  # 41 lines of 64, the last one shorter
    return [body[i : i + 64] for i in range(0, len(body), 64)]


def _leaked(lines: list[str], text: str) -> list[str]:
    """The key's lines, or the rest of a line the cut left, that are still in the text (8 characters or more)."""
    return [line[-16:] for line in lines if len(line) >= 8 and line[-16:] in text]


def test_text_cut_inside_a_pem_block_keeps_none_of_it():
    lines = _pem_lines(1)
    for cut in (0, 5, 17, 30):  # the text begins on a whole line, or inside one
        text = lines[cut][11:] + "\n" + "\n".join(lines[cut + 1 :]) + f"\n{END}\nI1203 proxier.go:1] synced\n"
        for out in (scrub_text(text), Redactor("t").text(text)):
            assert not _leaked(lines[cut:], out), out[:300]
            assert "[PEM REDACTED]" in out
            assert out.endswith("I1203 proxier.go:1] synced\n")  # the log after the block is kept
    # an END line with no key before it takes nothing with it
    text = f"I1203 server.go:1] a line\n{END}\nnext\n"
    assert scrub_text(text) == text.replace(END, "[PEM REDACTED]")


def test_collected_log_tail_cut_inside_a_key_leaks_none_of_it(tmp_path):
    """The real collector on a host root whose kube-proxy log's last 2 MB begin in the middle of a logged key."""
    lines = _pem_lines(2)
    pem = "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(lines) + f"\n{END}\n"
    line = "I1203 00:00:01.000000       1 proxier.go:1] Syncing iptables rules\n"
    start = len("-----BEGIN RSA PRIVATE KEY-----\n") + 65 * 20 + 30  # the tail begins 30 characters into line 20
    trailer_len = LOG_MAX_BYTES - (len(pem) - start)
    trailer = line * (trailer_len // len(line) - 1)
    trailer += "I1203 " + "x" * (trailer_len - len(trailer) - 7) + "\n"
    log = tmp_path / "host/var/log/pods/kube-system_kube-proxy-x1/kube-proxy/0.log"
    log.parent.mkdir(parents=True)
    log.write_text("I1203 00:00:00.000000       1 server.go:1] start\n" * 100 + pem + trailer)
    assert len(pem) - start + len(trailer) == LOG_MAX_BYTES  # the cut falls inside the key
    for redact in ([], ["--redact"]):
        out = tmp_path / f"bundle{len(redact)}"
        proc = subprocess.run(
            [sys.executable, "-m", "kpdiag", "collect", "--host-root", str(tmp_path / "host"), "-o", str(out)] + redact,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "NO_COLOR": "1"},
        )
        assert proc.returncode == 0, proc.stderr
        kept = (out / "node/kube-proxy/log.txt").read_text()
        assert "Syncing iptables rules" in kept
        assert not _leaked(lines, kept), kept[:400]


def test_api_file_that_is_not_json_is_left_out_of_a_redacted_copy(tmp_path):
    """kpdiag redact learns names from the API objects' structure: an API file it cannot parse (nested too deep, cut
    short, not UTF-8) went out as text with every name in it; now it is left out, with one line saying why."""
    import json
    import shutil

    from tests.conftest import FIXTURES

    src = tmp_path / "in"
    shutil.copytree(os.path.join(FIXTURES, "svc-selector-typo"), src)
    pods = json.loads((src / "cluster/pods.json").read_text())
    items = pods["items"] if isinstance(pods, dict) else pods
    deep = node = {}
    for _ in range(250):
        node["n"] = node = {}
    items[0]["metadata"]["name"] = "zebrapodcanary"
    items[0]["metadata"]["labels"]["team"] = "zebrateamcanary"
    items[0]["metadata"]["annotations"] = {"deep": deep}
    (src / "cluster/pods.json").write_text(json.dumps(pods))
    services = (src / "cluster/services.json").read_text().replace('"web"', '"zebrasvccanary"', 1)
    (src / "cluster/services.json").write_text(services[: len(services) // 2])  # cut short
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "kpdiag", "redact", str(src), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "not copied: cluster/pods.json: not JSON (nested deeper than 200 levels" in proc.stderr
    assert "not copied: cluster/services.json: not JSON" in proc.stderr
    for dirpath, _, names in os.walk(out):
        for name in names:
            data = open(os.path.join(dirpath, name), "rb").read()
            assert b"canary" not in data, os.path.join(dirpath, name)
    assert (out / "cluster/endpointslices.json").exists()  # the rest is copied, redacted


def test_a_file_in_utf16_is_left_out_of_a_redacted_copy():
    """A file added to a bundle by hand in UTF-16 (a Windows editor's default) interleaves NULs with its characters,
    so no secret pattern matched and it went out whole; now such a file is left out, saying why."""
    r = Redactor("salt")
    secret = "password=hunter2sekret\nAuthorization: Bearer abcdefghijklmnopqrstuvwxyz012345\n"
    wide = {"notes/ops.txt": secret.encode("utf-16"), "notes/le.txt": secret.encode("utf-16-le")}
    got = r.files({**wide, "notes/plain.txt": secret.encode(), "notes/padded.log": secret.encode() + b"\0" * 8})
    assert not any("ops.txt" in rel or "le.txt" in rel for rel in got), list(got)
    assert any("notes/le.txt: not UTF-8 text (UTF-16" in line for line in r.not_copied), r.not_copied
    # a log with a few stray NULs (padded after a crash) stays a text, redacted
    (padded,) = [v for k, v in got.items() if k.endswith("padded.log")]
    assert b"hunter2sekret" not in padded and padded.endswith(b"\0" * 8), padded
    (plain,) = [v for k, v in got.items() if k.endswith("plain.txt")]
    assert b"hunter2sekret" not in plain and b"abcdefghijklmnopqrstuvwxyz012345" not in plain, plain

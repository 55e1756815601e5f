"""Third-party checks load from the kpdiag.checks entry-point group; a broken plugin is reported, not fatal."""

import subprocess
import sys
import textwrap

from tests.conftest import FIXTURES


def _make_plugin(tmp_path, name, body, ep_target):
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent(body))
    dist = tmp_path / f"{name}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[kpdiag.checks]\n{name} = {ep_target}\n")


def test_entry_point_plugin_runs_and_broken_one_is_named(tmp_path):
    _make_plugin(
        tmp_path,
        "kpextra",
        """
        from kpdiag.checkapi import check

        @check("KP950", "always-note", "A plugin check", "info", needs=("sysctl",), uses=("manifest",),
               symptom="none", why="a plugin's explanation", fix="nothing")
        def always(ctx, new):
            yield new("the plugin ran on " + ctx.node_name, subject="node")
    """,
        "kpextra",
    )
    _make_plugin(tmp_path, "kpbroken", "raise ImportError('missing dependency frob')\n", "kpbroken")
    code = (
        "import sys, json; sys.path.insert(0, sys.argv[1]);"
        "from kpdiag.cli import main; sys.exit(main(['analyze', sys.argv[2], '-o', 'json', '--fail-on', 'never']))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path), f"{FIXTURES}/healthy-iptables"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    import json

    data = json.loads(proc.stdout)
    assert any(
        f["id"] == "KP950" and f["summary"] == "the plugin ran on lab-healthy-iptables" for f in data["findings"]
    )
    assert any(p["source"] == "plugin kpbroken" and "missing dependency frob" in p["error"] for p in data["problems"])

"""docs/tutorial.md shows real output: each block is what docs/make_tutorial.py printed by running the command on a
fixture. Re-run every command: the exit code and every finding id shown must still hold (the wording may move on;
`python3 docs/make_tutorial.py` refreshes the text)."""

import importlib.util
import os
import re

from tests.conftest import ROOT


def _maker():
    spec = importlib.util.spec_from_file_location("make_tutorial", os.path.join(ROOT, "docs", "make_tutorial.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_tutorial_outputs_still_hold():
    maker = _maker()
    text = open(os.path.join(ROOT, "docs", "tutorial.md"), encoding="utf-8").read()
    blocks = list(maker.blocks(text))
    assert len(blocks) >= 5
    for cmd, lines, recorded, code in blocks:
        assert recorded.startswith(f"$ {cmd}\n") and code is not None, f"block of {cmd!r} was not generated"
        got_code, out = maker.run(cmd)
        assert got_code == code, (cmd, got_code, out[-1500:])
        shown = set(re.findall(r"\bKP\d{3}\b", recorded))
        assert shown <= set(re.findall(r"\bKP\d{3}\b", out)), (cmd, shown)
        if lines is None:  # a whole output: its headline lines are still there
            for line in recorded.splitlines()[1:3]:
                assert line.split()[0] in out, (cmd, line)
    for fixture in set(re.findall(r"fixtures/([a-z0-9-]+)", text)):
        assert os.path.isfile(os.path.join(ROOT, "fixtures", fixture, "scenario.json")), fixture

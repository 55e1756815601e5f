"""fixtures/README.md is the table fixtures/index.py writes from every scenario.json — never stale."""

import importlib.util
import json
import os

from tests.conftest import FIXTURES


def _index():
    spec = importlib.util.spec_from_file_location("fixture_index", os.path.join(FIXTURES, "index.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_fixture_index_is_current():
    index = _index()
    with open(os.path.join(FIXTURES, "README.md"), encoding="utf-8") as fh:
        assert fh.read() == index.render(), "fixtures/README.md is stale: run python3 fixtures/index.py"


def test_fixture_index_has_every_scenario_and_its_expectations():
    text = open(os.path.join(FIXTURES, "README.md"), encoding="utf-8").read()
    names = sorted(d for d in os.listdir(FIXTURES) if os.path.isfile(os.path.join(FIXTURES, d, "scenario.json")))
    assert f"{len(names)} scenarios." in text
    rows = {line.split("](")[0][3:]: line for line in text.splitlines() if line.startswith("| [")}
    assert sorted(rows) == names
    for name in names:
        doc = json.load(open(os.path.join(FIXTURES, name, "scenario.json")))
        for fid in doc["expect"]["fires"]:
            assert fid in rows[name], (name, fid)


def test_stale_index_is_detected(tmp_path):
    index = _index()
    for name, fires in (("a-case", ["KP101"]), ("b-case", [])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "kpdiag.json").write_text("{}")
        (tmp_path / name / "scenario.json").write_text(json.dumps({"about": "x | y", "expect": {"fires": fires}}))
    text = index.render(str(tmp_path))
    assert (
        "| [a-case](a-case/) | node bundle | KP101 | x \\| y |" in text
        and "| [b-case](b-case/) | node bundle | nothing |" in text
    )
    (tmp_path / "c-case").mkdir()
    (tmp_path / "c-case" / "scenario.json").write_text(json.dumps({"about": "z", "expect": {"fires": []}}))
    assert index.render(str(tmp_path)) != text

"""README.md and docs/tutorial.md are tests (sybil, see tests/packaging/docblocks.py): every console block is run on
the fixtures and its output and exit code compared; every sh block is either run by another test (named) or says
why it cannot run here; every number counted from the code is checked. `python docs/make_docs.py` regenerates."""

import os
import re

import pytest

from tests.conftest import ROOT
from tests.packaging import docblocks

EXAMPLES = list(docblocks.examples())


def _id(example) -> str:
    what = example.parsed
    kind = f"count-{what[0]}" if isinstance(what, tuple) else what.language
    return f"{os.path.relpath(example.path, ROOT)}:{example.line}:{kind}"


@pytest.mark.parametrize("example", EXAMPLES, ids=[_id(e) for e in EXAMPLES])
def test_document_example(example):
    example.evaluate()


def _text(doc: str) -> str:
    with open(os.path.join(ROOT, doc), encoding="utf-8") as fh:
        return fh.read()


@pytest.mark.parametrize("doc", docblocks.DOCS)
def test_nothing_shown_escapes_the_tests(doc):
    """Every fenced block has a language; output (kpdiag's verdict lines, "$ " prompts) is only in console blocks,
    which run; a text block is a synopsis, not a transcript."""
    blocks = docblocks.fences(_text(doc))
    assert blocks, doc
    for language, source in blocks:
        assert language in ("console", "sh", "text", "yaml", "json"), (doc, language, source[:200])
        if language in ("text", "yaml", "json"):
            for line in source.splitlines():
                assert not line.lstrip().startswith(("$ ", "» ", "kpdiag: ")), (doc, line)
    ran = [e for e in EXAMPLES if not isinstance(e.parsed, tuple) and e.parsed.language == "console"]
    assert len([e for e in ran if str(e.path).endswith(doc)]) >= (3 if doc == "README.md" else 5), doc


def test_the_tutorial_runs_what_it_says():
    """The tutorial's recorded outputs: each names a fixture that exists, and the findings its prose discusses are
    in the outputs shown (which the console blocks check against kpdiag)."""
    text = _text("docs/tutorial.md")
    for fixture in set(re.findall(r"fixtures/([a-z0-9-]+)", text)):
        assert os.path.isfile(os.path.join(ROOT, "fixtures", fixture, "scenario.json")), fixture
    shown = "\n".join(src for lang, src in docblocks.fences(text) if lang == "console")
    for kp in ("KP101", "KP103", "KP113", "KP501", "KP601"):
        assert kp in shown, kp
    assert "every output below is real" in text.lower() or "every output" in text.lower()


def test_readme_keeps_the_test_command_that_ci_reads():
    """.ci/run takes the line two below <!-- test-command -->: one sh line, the README's test command."""
    lines = _text("README.md").splitlines()
    k = lines.index("<!-- test-command -->")
    assert lines[k + 1] == "```sh" and lines[k + 3] == "```", lines[k : k + 4]
    assert lines[k + 2].startswith("python3 -m venv .venv && ") and "pytest" in lines[k + 2]


def test_matching_rules():
    m = docblocks.matches
    assert m(["a", "b"], ["a", "b"]) and not m(["a"], ["a", "b"])
    assert m(["a", "…"], ["a", "b", "c"]) and m(["a", "…", "c"], ["a", "b", "c"]) and not m(["a", "…", "x"], ["a", "c"])
    assert not m(["a", "…", "b"], ["a"])  # too short for what is shown around the ellipsis
    assert docblocks.excerpt(["x", "…", "y"], ["1", "2", "3", "4"]) == ["1", "…", "4"]


def test_regeneration_rewrites_outputs_and_counts():
    stale = (
        "<!-- count: scenarios -->3 scenarios\n\n"
        "```console\n$ kpdiag explain KP501 | head -2\nold line\n…\n(exit 7)\n```\n"
        "<!-- not run: a live cluster -->\n```sh\nkubectl get pods\n```\n"
    )
    new = docblocks.regenerate(stale)
    assert f"<!-- count: scenarios -->{docblocks.COUNTS['scenarios']()} scenarios" in new
    assert "old line" not in new and "(exit 0)" in new and "KP501" in new.split("```console")[1]
    assert new.endswith("<!-- not run: a live cluster -->\n```sh\nkubectl get pods\n```\n")
    assert docblocks.regenerate(new) == new  # stable

"""README.md and docs/tutorial.md as tests, parsed with sybil (the documentation-testing library): what they show
is what kpdiag does.

The documents hold three kinds of examples:

``console`` blocks — run here, output compared::

    ```console
    $ kpdiag analyze fixtures/ip-forward-off
    kpdiag: lab-ip-forward-off
    …
    (exit 1)
    ```

  Each ``$ `` line is run with bash from the repository root (one bash for the block: ``cd``, ``export`` carry on),
  with NO_COLOR=1, COLUMNS=80, no TERM, and this interpreter's ``kpdiag`` first on PATH; stdout and stderr together
  must be the lines shown, and ``(exit N)`` the exit code of the last command. A line ``…`` stands for any number of
  lines: the lines before it are the output's first lines, those after it its last.

``sh`` blocks — what a user types on their own machine, node or cluster. Each is announced on the line before by
``<!-- not run: REASON -->`` (a live cluster or node, root on the host: reported as a skip with that reason) or
``<!-- run by: tests/…py -->`` (another test runs it verbatim from the document, e.g. in a fresh clone).

numbers that come from the code — ``<!-- count: NAME -->108``: NAME is one of :data:`COUNTS`.

``python docs/make_docs.py`` rewrites every console block's output and every counted number from what kpdiag prints
now (the same parser finds them); the tests say so when they fail.
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from sybil import Document, Region, Sybil
from sybil.parsers.markdown.lexers import FencedCodeBlockLexer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = ("README.md", "docs/tutorial.md")
REGENERATE = "python docs/make_docs.py"
WIDTH = 80
ELLIPSIS = "…"
MARKER = re.compile(r"<!-- (?P<kind>not run|run by): (?P<why>.+?) -->\n$")
EXIT = re.compile(r"^\(exit (\d+)\)$")
TEST_COMMAND = "<!-- test-command -->"  # .ci/run takes the line two below it
TEST_COMMAND_RUN_BY = (
    ".ci/run (CI runs the README's test command; tests/lab/test_fresh_debian.py and "
    "tests/packaging/test_readme_commands.py run it verbatim in a fresh Debian and a fresh clone)"
)


# ------------------------------------------------------------------------------------------------ counted numbers
def _fixture_index():
    import importlib.util

    spec = importlib.util.spec_from_file_location("fixture_index", os.path.join(ROOT, "fixtures", "index.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _scenarios() -> int:
    return len(_fixture_index().scenarios(os.path.join(ROOT, "fixtures")))


def _report_dirs() -> int:
    index = _fixture_index()
    fixtures = os.path.join(ROOT, "fixtures")
    return sum(1 for name, _ in index.scenarios(fixtures) if index.kind(os.path.join(fixtures, name)) == "node reports")


def _checks() -> int:
    from kpdiag.checkapi import load_registry

    return sum(1 for c in load_registry().checks if c.origin.startswith("kpdiag.checks."))  # not plugins


def _conformance_nft() -> int:
    base = os.path.join(ROOT, "tests", "upstream", "conformance", "kube-proxy-nftables")
    return sum(1 for d in os.listdir(base) if os.path.isdir(os.path.join(base, d))) if os.path.isdir(base) else 0


COUNTS = {
    "scenarios": _scenarios,  # fixtures/*/scenario.json
    "report-dirs": _report_dirs,  # fixtures that are directories of node reports
    "checks": _checks,  # the built-in catalogue (kpdiag checks)
    "nft-cases": _conformance_nft,  # kube-proxy's kernel-recorded nftables cases
}
COUNT = re.compile(r"<!-- count: (?P<name>[a-z-]+) -->(?P<value>\d[\d,]*)")


# ------------------------------------------------------------------------------------------------------- blocks
@dataclass
class Block:
    language: str
    source: str  # the block's text between the fences
    marker: str | None = None  # "not run" / "run by"
    why: str = ""

    @property
    def commands(self) -> list[str]:
        return [line[2:] for line in self.source.splitlines() if line.startswith("$ ")]

    @property
    def shown(self) -> tuple[list[str], int | None]:
        """The output lines shown (after the commands) and the exit code shown."""
        lines = [line for line in self.source.rstrip("\n").split("\n") if not line.startswith("$ ")]
        code = None
        if lines and EXIT.match(lines[-1]):
            code = int(EXIT.match(lines[-1]).group(1))
            lines = lines[:-1]
        return lines, code


def run_commands(commands: list[str]) -> tuple[int, list[str]]:
    """The commands in one bash from the repository root, as the documents promise: (exit code, output lines)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TERM", "COLUMNS", "LINES")}
    env.update(NO_COLOR="1", COLUMNS=str(WIDTH), PYTHONIOENCODING="utf-8")
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    proc = subprocess.run(
        ["bash", "-c", "\n".join(commands)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    return proc.returncode, proc.stdout.rstrip("\n").split("\n") if proc.stdout.strip() else []


def _split(shown: list[str]) -> tuple[list[str], list[str] | None]:
    if ELLIPSIS not in shown:
        return shown, None
    k = shown.index(ELLIPSIS)
    return shown[:k], shown[k + 1 :]


def matches(shown: list[str], got: list[str]) -> bool:
    head, tail = _split(shown)
    got = [line.rstrip() for line in got]
    head = [line.rstrip() for line in head]
    if tail is None:
        return head == got
    tail = [line.rstrip() for line in tail]
    return len(got) >= len(head) + len(tail) and got[: len(head)] == head and (not tail or got[-len(tail) :] == tail)


def excerpt(shown: list[str], got: list[str]) -> list[str]:
    """What the block should show now: as many first and last lines as it shows."""
    head, tail = _split(shown)
    if tail is None:
        return got
    cut = got[: len(head)] + [ELLIPSIS] + (got[-len(tail) :] if tail else [])
    return cut if len(got) > len(head) + len(tail) else got


def evaluate_block(example) -> str | None:
    """sybil evaluator: None when the document holds, else what differs (a string sybil reports as the failure)."""
    import pytest

    block: Block = example.parsed
    if block.language == "sh":
        if block.marker == "not run":
            pytest.skip(f"not run here: {block.why}")
        if block.marker == "run by":
            path = os.path.join(ROOT, block.why.split()[0])
            return None if os.path.isfile(path) else f"the block says it is run by {block.why}: no such test"
        return "an sh block needs <!-- not run: REASON --> or <!-- run by: TEST --> on the line before it"
    if block.marker == "not run":
        pytest.skip(f"not run here: {block.why}")
    if not block.commands:
        return "a console block needs a '$ command' line"
    shown, code = block.shown
    if code is None:
        return "a console block ends with '(exit N)'"
    got_code, got = run_commands(block.commands)
    problems = []
    if got_code != code:
        problems.append(f"exit code {got_code}, the document shows {code}")
    if not matches(shown, got):
        want = excerpt(shown, got)
        problems.append("\n".join(difflib.unified_diff(shown, want, "shown", "printed now", lineterm="")))
    if problems:
        return "\n".join(problems) + f"\n(regenerate with: {REGENERATE})"
    return None


def evaluate_count(example) -> str | None:
    name, value = example.parsed
    if name not in COUNTS:
        return f"unknown count {name!r} (known: {', '.join(COUNTS)})"
    now = COUNTS[name]()
    if int(value.replace(",", "")) != now:
        return f"the document says {value} for {name}, it is {now} (regenerate with: {REGENERATE})"
    return None


class BlockParser:
    """sybil parser: each fenced console/sh block with the marker line before it."""

    def __init__(self):
        self.lexer = FencedCodeBlockLexer(language=r"console|sh")

    def __call__(self, document: Document):
        for region in self.lexer(document):
            before = document.text[: region.start]
            line_start = before.rstrip("\n").rfind("\n") + 1
            previous = before[line_start:] if before.endswith("\n") else ""
            m = MARKER.search(previous)
            block = Block(
                language=region.lexemes["language"],
                source=str(region.lexemes["source"]),
                marker=m.group("kind") if m else None,
                why=m.group("why") if m else "",
            )
            if previous == TEST_COMMAND + "\n":  # the README's test command: .ci/run reads and runs it
                block.marker, block.why = "run by", TEST_COMMAND_RUN_BY
            yield Region(region.start, region.end, block, evaluate_block)


class CountParser:
    """sybil parser: each counted number in the prose."""

    def __call__(self, document: Document):
        for m in COUNT.finditer(document.text):
            yield Region(m.start(), m.end(), (m.group("name"), m.group("value")), evaluate_count)


SYBIL = Sybil(parsers=[BlockParser(), CountParser()], path=ROOT, patterns=list(DOCS))


def examples():
    """Every example of the documents, in order."""
    for doc in DOCS:
        yield from SYBIL.parse(Path(ROOT) / doc).examples()


def fences(text: str) -> list[tuple[str, str]]:
    """Every fenced block of a document: (language, source) — for the rule that nothing shown escapes the tests."""
    lexer = FencedCodeBlockLexer(language=r"[^\n]*")
    doc = Document(text, "<doc>")
    return [(r.lexemes["language"].strip(), str(r.lexemes["source"])) for r in lexer(doc)]


# ------------------------------------------------------------------------------------------------- regeneration
def regenerate(text: str, path: str = "<doc>") -> str:
    """``text`` with every console block's output and exit code, and every counted number, as kpdiag gives them now."""
    doc = Document(text, path)
    edits: list[tuple[int, int, str]] = []
    for region in BlockParser()(doc):
        block: Block = region.parsed
        if block.language != "console" or block.marker == "not run" or not block.commands:
            continue
        shown, _ = block.shown
        code, got = run_commands(block.commands)
        body = "".join(f"$ {c}\n" for c in block.commands) + "".join(f"{line}\n" for line in excerpt(shown, got))
        body += f"(exit {code})\n"
        old = text[region.start : region.end]
        first = old.split("\n", 1)[0]
        edits.append((region.start, region.end, f"{first}\n{body}```"))
    for m in COUNT.finditer(text):
        edits.append((m.start("value"), m.end("value"), str(COUNTS[m.group("name")]())))
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


# ------------------------------------------------------------------------------------------ 80-column goldens
GOLDEN_DIR = os.path.join(ROOT, "tests", "cli", "golden")
GOLDEN = {  # file: the command whose whole output (COLUMNS=80) it holds — one of each report kind
    "node.txt": "kpdiag analyze fixtures/ipvs-fallback",
    "node-table.txt": "kpdiag analyze fixtures/ipvs-fallback -o table",
    "service.txt": "kpdiag analyze fixtures/svc-path-broken",
    "cluster.txt": "kpdiag analyze fixtures/cluster-fleet-drift",
    "cluster-table.txt": "kpdiag analyze fixtures/cluster-fleet-drift -o table",
    "trace.txt": "kpdiag trace --bundle fixtures/ip-forward-off --from pod --src 10.244.1.10 --dst 10.96.0.20 --dport 80",
    "policy.txt": "kpdiag policy --bundle fixtures/netpol-ingress-denied --from debug/client --to shop/web --port 80",
    "checks.txt": "kpdiag checks",
}


def golden_text(command: str) -> str:
    code, got = run_commands([command])
    return f"$ {command}\n" + "".join(f"{line}\n" for line in got) + f"(exit {code})\n"


def write_goldens() -> list[str]:
    """Rewrite every golden file whose output changed; the names rewritten."""
    changed = []
    os.makedirs(GOLDEN_DIR, exist_ok=True)
    for name, command in GOLDEN.items():
        path = os.path.join(GOLDEN_DIR, name)
        new = golden_text(command)
        old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if new != old:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(new)
            changed.append(os.path.relpath(path, ROOT))
    return changed


def too_wide(lines: list[str], width: int = WIDTH) -> list[str]:
    """The lines wider than ``width`` that the rule does not allow. The rule: a line is wider only because of one
    token — a word without a blank, or one quoted shell string — that would not fit on a line of its own after the
    line's indentation either, the rest of the line fitting."""
    from kpdiag.render.report import _shell_words

    bad = []
    for line in lines:
        if len(line) <= width:
            continue
        indent = len(line) - len(line.lstrip())
        words = _shell_words(line.strip())
        long = [w for w in words if indent + len(w) > width - 2]  # 2: room for a " \\" after it
        if len(long) == 1 and len(line) - len(long[0]) <= width:
            continue
        bad.append(line)
    return bad


def readme_commands() -> tuple[str, str]:
    """The README's two commands, as the sybil parser finds them: the install + demo line (the sh block run by
    tests/lab/test_fresh_debian.py) and the test command (the sh block after <!-- test-command -->)."""
    blocks = [e.parsed for e in SYBIL.parse(Path(ROOT) / "README.md").examples() if isinstance(e.parsed, Block)]
    demo = [b for b in blocks if b.marker == "run by" and b.why.startswith("tests/lab/test_fresh_debian.py")]
    test = [b for b in blocks if b.why == TEST_COMMAND_RUN_BY]
    assert len(demo) == 1 and len(test) == 1, "README.md: the install + demo block and the test-command block"
    demo_line, test_line = demo[0].source.strip(), test[0].source.strip()
    assert "\n" not in demo_line and "\n" not in test_line, "each README command is one line"
    return demo_line, test_line

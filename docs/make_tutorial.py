"""Fill docs/tutorial.md's output blocks by running the commands it shows on the repository's fixtures.

Each block is announced by a marker line

    <!-- run: kpdiag analyze fixtures/svc-selector-typo -->
    <!-- run: kpdiag trace … ; lines: 12 -->          (only the first 12 lines, then "…")

and the ``` block right after it is replaced with "$ COMMAND", its output (NO_COLOR=1, COLUMNS=100, run from the
repository root with this interpreter's kpdiag) and "(exit N)". Nothing in the tutorial's output blocks is written
by hand. tests/packaging/test_tutorial.py re-runs the commands and checks the exit codes and finding ids still hold.

    python3 docs/make_tutorial.py
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PATH = os.path.join(HERE, "tutorial.md")
MARK = re.compile(r"^<!-- run: (?P<cmd>.+?)(?: ; lines: (?P<lines>\d+))? -->\n```[^\n]*\n.*?^```\n", re.M | re.S)


def run(cmd: str) -> tuple[int, str]:
    argv = shlex.split(cmd)
    assert argv[0] == "kpdiag", cmd
    env = dict(os.environ, NO_COLOR="1", COLUMNS="100")
    env.pop("TERM", None)
    proc = subprocess.run(
        [sys.executable, "-m", "kpdiag", *argv[1:]], cwd=ROOT, capture_output=True, text=True, env=env, timeout=300
    )
    return proc.returncode, proc.stdout + proc.stderr


def blocks(text: str):
    """(command, lines or None, recorded output, recorded exit code) for each marked block."""
    for m in MARK.finditer(text):
        body = m.group(0).split("\n", 2)[2].rsplit("```", 1)[0]
        code = re.search(r"^\(exit (\d+)\)$", body, re.M)
        yield (
            m.group("cmd"),
            (int(m.group("lines")) if m.group("lines") else None),
            body,
            int(code.group(1)) if code else None,
        )


def render(text: str) -> str:
    def fill(m: re.Match) -> str:
        cmd, lines = m.group("cmd"), m.group("lines")
        code, out = run(cmd)
        out_lines = out.rstrip("\n").split("\n")
        if lines and len(out_lines) > int(lines):
            out_lines = out_lines[: int(lines)] + ["…"]
        head = m.group(0).split("\n", 1)[0]
        return f"{head}\n```\n$ {cmd}\n" + "\n".join(out_lines) + f"\n(exit {code})\n```\n"

    return MARK.sub(fill, text)


def main() -> int:
    with open(PATH, encoding="utf-8") as fh:
        text = fh.read()
    new = render(text)
    with open(PATH, "w", encoding="utf-8") as fh:
        fh.write(new)
    print(f"wrote {PATH} ({len(list(blocks(new)))} command outputs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

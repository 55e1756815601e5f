"""Regenerate what README.md and docs/tutorial.md show from what kpdiag prints now: every ```console block's output
and exit code (run on the repository's fixtures, NO_COLOR=1, COLUMNS=80) and every number counted from the code
(`<!-- count: NAME -->N`) — the layers of docs/architecture.md §2 (from pyproject.toml's import-linter contract
and each module's docstring: tests/packaging/layout.py) — and the 80-column golden outputs of each report kind
(tests/cli/golden/, checked by tests/cli/test_width.py). Nothing in those outputs is written by hand;
tests/packaging/test_docs.py (sybil) runs the same blocks and fails when a document and kpdiag disagree. A block that
shows a few first (and last) lines around a "…" line keeps showing as many.

    python docs/make_docs.py            # rewrite the documents
    python docs/make_docs.py --check    # exit 1 when one is stale (what the tests check), rewrite nothing
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.packaging.docblocks import DOCS, GOLDEN, golden_text, regenerate, write_goldens  # noqa: E402
from tests.packaging import layout  # noqa: E402


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for doc in (*DOCS, layout.ARCH):
        path = os.path.join(ROOT, doc)
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        new = layout.regenerate(text) if doc == layout.ARCH else regenerate(text, path)
        if new != text:
            stale.append(doc)
            if not check:
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write(new)
    if check:
        from tests.packaging.docblocks import GOLDEN_DIR

        for name, command in GOLDEN.items():
            path = os.path.join(GOLDEN_DIR, name)
            if not os.path.exists(path) or open(path, encoding="utf-8").read() != golden_text(command):
                stale.append(os.path.relpath(path, ROOT))
        print("stale: " + ", ".join(stale) if stale else "up to date")
        return 1 if stale else 0
    stale += write_goldens()
    print("rewrote " + ", ".join(stale) if stale else "nothing to change")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

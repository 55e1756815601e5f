"""`python -m kpdiag.cli`: the console entry, as `python -m kpdiag` (kpdiag/cli/__init__.py `run`)."""

from kpdiag.cli import run

if __name__ == "__main__":  # pragma: no cover
    run()

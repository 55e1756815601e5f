"""`python -m kpdiag`: the console entry (kpdiag/cli/__init__.py `run`)."""

from .cli import run

run()

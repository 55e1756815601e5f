"""`python -m kpdiag`: the console entry (kpdiag/cli.py `run`)."""

from .cli import run

run()

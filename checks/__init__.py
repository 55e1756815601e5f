"""The built-in checks (installed as ``kpdiag.checks``; kpdiag/checks is a symlink here for editable use): each module
holds the checks of one area (docs/architecture.md §5), found by the registry (kpdiag/checkapi.py), never imported
by the engine."""

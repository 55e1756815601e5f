"""The registry of declared checks, by id: filled by :func:`kpdiag.checkapi.check`, read by the runner and by the
root-cause pass (kpdiag/rootcause.py), which must not import the runner."""

from __future__ import annotations

_REGISTRY: dict = {}  # check id → CheckSpec

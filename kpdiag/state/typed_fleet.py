"""Typed inputs of the cluster checks (kpdiag/state/typed.py says what a typed input is), built from a
kpdiag.fleet.aggregate.FleetState: the node reports of a fleet run and the tables the nodes programmed.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from typing_extensions import Self

    from kpdiag.state.inputs import Inputs

from kpdiag.state.typed import Typed


@dataclass(frozen=True)
class NodeReports(Typed):
    """The node reports of a fleet run (``kpdiag cluster``, ``kpdiag analyze DIR``): every node's result (``results``:
    kpdiag.fleet.aggregate.NodeResult, its normalised report or why there is none), the diagnosed ones (``ok``), their
    findings by check id, and the API server's version (None: not asked)."""

    INPUT: ClassVar[str] = "node-reports"
    SCOPE: ClassVar[str] = "cluster"
    results: tuple[Any, ...]  # every NodeResult, diagnosed or not
    ok: tuple[Any, ...]  # the NodeResults with a report
    api_version: str | None  # the API server's gitVersion
    findings_by_check: typing.Mapping[str, Any]  # check id → [(node, finding dict)]
    common_threshold: int  # a node finding on at least this many nodes is reported once (KP805)
    _fact: typing.Callable[..., Any] = field(repr=False, compare=False)

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        return cls(
            tuple(ctx.results),
            tuple(ctx.ok),
            ctx.api_version,
            ctx.node_findings_by_check(),
            ctx.common_threshold(),
            lambda r, key: ctx.fact(r, key),
        )

    def fact(self, r: Any, key: str) -> Any:
        """A fact of node result ``r``'s report (``proxy_mode``, ``zone``, ``kube_proxy_version`` …), or None."""
        return self._fact(r, key)


@dataclass(frozen=True)
class ProgrammedTables(Typed):
    """The Service ports the nodes programmed (their reports' programmed tables), nodes with identical tables grouped,
    and the internalTrafficPolicy: Local ports (each node programs its own endpoints for those, by design)."""

    INPUT: ClassVar[str] = "programmed"
    SCOPE: ClassVar[str] = "cluster"
    # (one document, node names, decoded table: "ClusterIP:port/proto" → (name, endpoints digest, count)), biggest first
    groups: tuple[Any, ...]
    local_keys: frozenset[str]  # internalTrafficPolicy: Local ports, from the API and from the nodes' own rules
    policy_known: bool  # every table tells those ports apart, or the API was read

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        return cls(tuple(ctx.programmed_groups()), frozenset(ctx.local_keys), ctx.policy_known)

    @property
    def nodes(self) -> int:
        """How many nodes reported a programmed table."""
        return sum(len(nodes) for _, nodes, _ in self.groups)

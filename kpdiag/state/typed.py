"""Typed inputs: what a check needs, said by its signature (docs/architecture.md, "Typed inputs").

A check may take its inputs as typed parameters instead of ``ctx``::

    @check("KP613", ..., severity="warning", ...)
    def cidr_misses_node(new, config: KubeProxyConfig, nodes: NodePodCIDRs, sysctls: Optional[Sysctls] = None):

A parameter typed ``T`` is a *need* of the check (input ``T.INPUT``: when it is missing the check is skipped with the
reason, as for ``needs=``); ``Optional[T]`` is a *use* (the check gets None when the input is not there). The runner
builds each value with ``T.build(view)`` from a view that opens ``T.INPUT`` only (state/inputs.py polices it), and
calls the check with plain values: a check that receives no state cannot read an input it did not declare, so it
needs no static analysis (tests/packaging/test_check_inputs.py reads the few ``build`` functions instead: a
build uses its view only as ``ctx.NAME``, ``ctx.cluster.NAME`` or ``ctx.source(sources.X)``-like calls naming the
source — ``ctx.file(sources.X)`` keeps one to read later — never hands it to a helper).

A typed input is a frozen dataclass of fields (``NodePodCIDRs.nodes[i].cidrs``), built from one named input of the
catalogue (``INPUT``); adding one is a class in the module of its area — no grant string in state/inputs.py: the node
itself (typed_node.py), kube-proxy and its dataplanes (typed_proxy.py), the API side and the probes (typed_api.py),
the cluster checks (typed_fleet.py). This module holds what they share: the base class and how a check's signature
is read and called.
"""

from __future__ import annotations

import typing
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from typing_extensions import Self

    from kpdiag.checkapi import CheckSpec
    from kpdiag.state.inputs import Inputs


class Typed:
    """The base of typed inputs: ``INPUT`` names the catalogue input it is built from (its presence, its skip reason,
    the sources it opens); ``build(ctx)`` makes the value from a view opening that input only (None: not there);
    ``FILES``, when set, the bundle files that show its fact was collected (else the input's ``files``)."""

    INPUT: ClassVar[str]
    SCOPE: ClassVar[str] = "node"  # the catalogue INPUT is in: "node" (NodeState), "cluster" (FleetState)
    # the bundle files that show the fact it carries was collected, when narrower than its input's (Input.files)
    FILES: ClassVar[tuple[str, ...] | None] = None

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:  # pragma: no cover - every subclass defines it
        raise NotImplementedError


def parameters(fn: typing.Callable[..., Any]) -> tuple[tuple[str, type[Typed], bool], ...] | None:
    """A typed check's parameters: (name, typed input, optional) for each but ``new`` — or None for a check written
    the old way (``ctx, new``). A parameter that is neither ``new`` nor a typed input is a declaration error."""
    import inspect

    names = [p for p in inspect.signature(fn).parameters if p != "new"]
    if not names or names == ["ctx"]:
        return None
    hints = typing.get_type_hints(fn)
    out = []
    for name in names:
        hint = hints.get(name)
        optional = False
        args = typing.get_args(hint)
        if args and type(None) in args:
            rest = [a for a in args if a is not type(None)]
            hint, optional = (rest[0] if len(rest) == 1 else None), True
        if not (isinstance(hint, type) and issubclass(hint, Typed) and hint is not Typed):
            raise ValueError(
                f"check {fn.__name__}: parameter {name!r} is not a typed input (kpdiag/state/typed.py) nor 'new'"
            )
        out.append((name, hint, optional))
    return tuple(out)


def call(
    fn: typing.Callable[..., Any],
    params: tuple[tuple[str, type[Typed], bool], ...],
    ctx: Inputs,
    new: typing.Callable[..., Any],
    skip: typing.Callable[[str], Exception],
) -> Any:
    """Build each typed input from the check's view and call the check with them (``skip``: checkapi.Skip, raised
    when a needed input is there but cannot be read as its type)."""
    from kpdiag.state.inputs import Inputs

    kwargs = {}
    for name, typ, _optional in params:
        view = Inputs(ctx._target, ctx.check_id, (typ.INPUT,), typ.SCOPE)  # the one input it is built from
        object.__setattr__(view, "violations", ctx.violations)  # a lazy field's reads later are policed as one
        kwargs[name] = typ.build(view)
        if kwargs[name] is None and not _optional:  # there, but not in a form it can be read as
            raise skip(f"needs {view_what(typ)}, which is missing or unreadable")
    return fn(new=new, **kwargs)


def evident_by(spec: CheckSpec, name: str) -> tuple[str, ...]:
    """The bundle files any one of which shows that input ``name`` of check ``spec`` was collected: a typed parameter's
    ``FILES``, else the input's own (``Input.evident_by``)."""
    from kpdiag.state.inputs import catalogue

    for _, typ, _ in spec.params:
        files: tuple[str, ...] | None = typ.FILES
        if typ.INPUT == name and files is not None:
            return files
    return catalogue(spec.scope)[name].evident_by


def view_what(typ: type[Typed]) -> str:
    from kpdiag.state.inputs import catalogue

    return catalogue(typ.SCOPE)[typ.INPUT].what

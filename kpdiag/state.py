"""NodeState: a bundle's files parsed once, lazily, each parse error recorded (file and line).

A live run and an offline ``analyze`` both produce a :class:`~kpdiag.bundle.Bundle` and go
through this same code, so they see the same state.
"""

from __future__ import annotations

from functools import cached_property

from .bundle import Bundle
from .errors import InputError


class NodeState:
    def __init__(self, bundle: Bundle):
        self.bundle = bundle

    @property
    def problems(self):
        return self.bundle.problems

    def _parse(self, rel: str, parser, *, json_input: bool = False, record_missing: bool = False):
        data = self.bundle.read_json(rel, record_missing) if json_input else self.bundle.read_text(rel, record_missing)
        if data is None:
            return None
        try:
            return parser(data, self.bundle.display(rel))
        except InputError as exc:
            self.bundle.problems.append(_problem(exc))
            return None

    # ------------------------------------------------------------ iptables
    def iptables(self, which: str = "iptables-save"):
        """The ruleset of ``node/<which>.txt`` (``iptables-save``, ``iptables-legacy-save`` …) or None."""
        from .parse.iptables import parse_iptables_save

        cache = self.__dict__.setdefault("_iptables", {})
        if which not in cache:
            cache[which] = self._parse(f"node/{which}.txt", parse_iptables_save)
        return cache[which]

    @cached_property
    def ipsets(self):
        from .parse.ipset import parse_ipset_save

        return self._parse("node/ipset.txt", parse_ipset_save)

    @cached_property
    def ip_addr(self):
        data = self.bundle.read_json("node/ip-addr.json")
        if data is not None and not isinstance(data, list):
            self.bundle.problem("node/ip-addr.json", "expected a JSON list (ip -j addr)")
            return None
        return data

    @cached_property
    def ip_route(self):
        data = self.bundle.read_json("node/ip-route.json")
        if data is not None and not isinstance(data, list):
            self.bundle.problem("node/ip-route.json", "expected a JSON list (ip -j route)")
            return None
        return data

    @cached_property
    def routing(self):
        from .trace.routing import routing_from_ip_json

        return routing_from_ip_json(self.ip_addr, self.ip_route)

    @property
    def node_name(self) -> str:
        return str(self.bundle.manifest.get("node") or "")


def _problem(exc: InputError):
    from .bundle import Problem

    where = exc.source if exc.line is None else f"{exc.source}:{exc.line}"
    return Problem(where, exc.message)

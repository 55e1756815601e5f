"""Parser for ``nft -j list ruleset``: tables, chains (hook, priority, policy), rules (the JSON
expression tree, kept as is), sets and maps with their elements. General for any table; the
tracer says which expressions it cannot evaluate."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import InputError
from .decode import MAX_DEPTH, TooDeep, json_too_deep, load_json

HOOK_PRIO_NAMES = {"raw": -300, "mangle": -150, "dstnat": -100, "filter": 0, "security": 50, "srcnat": 100}


class NftRule:
    """One rule; its expression tree is kept as JSON text and decoded the first time it is needed
    (a 10,000-service table has 130,000 rules: decoded all at once they take hundreds of MB)."""

    __slots__ = ("family", "table", "chain", "index", "handle", "comment", "_expr", "_raw", "_text")

    def __init__(self, family, table, chain, index, handle, expr=None, comment=None, raw: str | None = None):
        self.family, self.table, self.chain, self.index, self.handle, self.comment = (
            family,
            table,
            chain,
            index,
            handle,
            comment,
        )
        self._expr = expr
        self._raw = raw
        self._text: str | None = None

    @property
    def expr(self) -> list:
        if self._expr is None:
            assert self._raw is not None  # a rule is made with its expression or its raw text
            body = json.loads(self._raw)["rule"]
            expr = body.get("expr")
            self._expr = expr if isinstance(expr, list) else []
            self._raw = None
        return self._expr

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = render_rule(self.expr) + (f' comment "{self.comment}"' if self.comment else "")
        return self._text


@dataclass
class NftChain:
    family: str
    table: str
    name: str
    type: str | None = None
    hook: str | None = None
    prio: int | None = None
    policy: str | None = None
    rules: list[NftRule] = field(default_factory=list)

    @property
    def base(self) -> bool:
        return self.hook is not None


@dataclass
class NftSet:
    family: str
    table: str
    name: str
    type: list | str
    is_map: bool = False
    map_type: str | None = None
    flags: list = field(default_factory=list)
    elems: list = field(default_factory=list)  # raw JSON elements ([key, value] for maps)


@dataclass
class NftRuleset:
    source: str
    chains: dict[tuple[str, str, str], NftChain] = field(default_factory=dict)
    sets: dict[tuple[str, str, str], NftSet] = field(default_factory=dict)
    tables: list[tuple[str, str]] = field(default_factory=list)
    rule_count: int = 0

    def chain(self, family: str, table: str, name: str) -> NftChain | None:
        return self.chains.get((family, table, name))

    def set(self, family: str, table: str, name: str) -> NftSet | None:
        return self.sets.get((family, table, name))

    def base_chains(self, families: tuple[str, ...], hook: str) -> list[NftChain]:
        """Base chains on ``hook`` by priority (computed once: a 10,000-service table has 60,000 chains)."""
        cache = self.__dict__.setdefault("_base_cache", {})
        key = (families, hook)
        if key not in cache:
            found = [c for c in self.chains.values() if c.base and c.hook == hook and c.family in families]
            cache[key] = sorted(found, key=lambda c: c.prio if c.prio is not None else 0)
        return cache[key]

    def has_table(self, family: str, name: str) -> bool:
        return (family, name) in self.tables


def _prio(value) -> int | None:
    if value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        base, _, off = value.replace(" ", "").partition("+")
        if "-" in base[1:]:
            base, off = base.split("-", 1)
            off = "-" + off
        return HOOK_PRIO_NAMES.get(base, 0) + (int(off) if off else 0)
    return None


def _items(text: str, source: str):
    """(item, raw text) for each element of the top-level "nftables" array, decoded one at a time."""
    decoder = json.JSONDecoder()
    m = re.match(r'\s*\{\s*"nftables"\s*:\s*\[', text)
    if not m:
        try:
            doc = load_json(text)
        except TooDeep as exc:
            raise InputError(source, f"JSON {exc}") from None
        except json.JSONDecodeError as exc:
            raise InputError(source, f"invalid JSON: {exc.msg} (column {exc.colno})", exc.lineno) from None
        except RecursionError:
            raise InputError(source, f"JSON nested deeper than {MAX_DEPTH} levels: refused") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("nftables"), list):
            raise InputError(source, 'not "nft -j list ruleset" output (no top-level "nftables" list)')
        for item in doc["nftables"]:
            yield item, None
        return
    pos, end = m.end(), len(text)
    ws = re.compile(r"[\s,]*")
    while True:
        skipped = ws.match(text, pos)  # (it matches the empty string too)
        pos = skipped.end() if skipped else pos
        if pos >= end:
            raise InputError(source, "truncated: the nftables list does not end", text.count("\n", 0, end) + 1)
        if text[pos] == "]":
            return
        try:
            item, nxt = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise InputError(source, f"invalid JSON: {exc.msg} (column {exc.colno})", exc.lineno) from None
        except RecursionError:
            raise InputError(source, f"JSON nested deeper than {MAX_DEPTH} levels: refused") from None
        raw = text[pos:nxt]
        if json_too_deep(raw):  # the rules' expressions are walked recursively later
            raise InputError(
                source, f"JSON nested deeper than {MAX_DEPTH} levels: refused", text.count("\n", 0, pos) + 1
            )
        yield item, raw
        pos = nxt


def _top_items(data: str | bytes | dict, source: str) -> Iterator[tuple[Any, str | None]]:
    """The items of the top-level ``nftables`` list, each with its raw JSON text when read from text."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(source, "not a JSON text (not UTF-8)") from None
    if isinstance(data, str):
        return _items(data, source)
    if not isinstance(data, dict) or not isinstance(data.get("nftables"), list):
        raise InputError(source, 'not "nft -j list ruleset" output (no top-level "nftables" list)')
    return ((item, None) for item in data["nftables"])


def _declare(rs: NftRuleset, source: str, n: int, kind: str, body: Any) -> None:
    """File a chain, set or map item under its (family, table, name)."""
    key = _names(source, n, kind, body.get("family", "ip"), body.get("table", ""), body.get("name", ""))
    if kind == "chain":
        rs.chains[key] = NftChain(
            *key,
            type=body.get("type"),
            hook=body.get("hook"),
            prio=_prio(body.get("prio")),
            policy=body.get("policy"),
        )
    else:
        rs.sets[key] = NftSet(
            *key,
            type=body.get("type"),
            is_map=kind == "map",
            map_type=body.get("map"),
            flags=list(body.get("flags") or []),
            elems=list(body.get("elem") or []),
        )


def _add_rule(rs: NftRuleset, source: str, meta: dict, expr_or_raw: Any) -> None:
    """Append a rule to its chain (declared anywhere in the ruleset); its expression kept raw when read from text."""
    key = (meta.get("family") or "ip", meta.get("table") or "", meta.get("chain") or "")
    chain = rs.chains.get(key)
    if chain is None:
        raise InputError(source, f"rule for chain {key[2]!r} of table {key[1]!r}, which is not declared")
    raw = expr_or_raw if isinstance(expr_or_raw, str) else None
    expr = None if raw is not None else expr_or_raw
    chain.rules.append(
        NftRule(
            *key,
            index=len(chain.rules) + 1,
            handle=meta.get("handle"),
            expr=expr,
            comment=meta.get("comment"),
            raw=raw,
        )
    )
    rs.rule_count += 1


def parse_nft_json(data: str | bytes | dict, source: str = "nft -j list ruleset") -> NftRuleset:
    rs = NftRuleset(source=source)
    pending: list[tuple[dict, str | None]] = []
    for n, (item, raw) in enumerate(_top_items(data, source)):
        if not isinstance(item, dict) or len(item) != 1:
            raise InputError(source, f"nftables[{n}] is not a single-key object")
        ((kind, body),) = item.items()
        if not isinstance(body, dict) and kind != "metainfo":
            raise InputError(source, f"nftables[{n}].{kind} is not an object")
        if kind == "table":
            rs.tables.append((body.get("family", "ip"), body.get("name", "")))
        elif kind in ("chain", "set", "map"):
            _declare(rs, source, n, kind, body)
        elif kind == "rule":
            if not isinstance(body.get("expr"), list):
                raise InputError(source, f"rule {body.get('handle')} in {body.get('chain')} has no expression list")
            meta = {k: body.get(k) for k in ("family", "table", "chain", "handle", "comment")}
            _names(source, n, kind, meta["family"] or "ip", meta["table"] or "", meta["chain"] or "")
            pending.append((meta, raw) if raw is not None else (meta, body["expr"]))
    for meta, expr_or_raw in pending:  # rules after every chain: a rule may come before its chain's declaration
        _add_rule(rs, source, meta, expr_or_raw)
    return rs


def _names(source: str, n: int, kind: str, family: object, table: object, name: object) -> tuple[str, str, str]:
    """(family, table, name) of an item, each a string (a chain named by a list is no chain)."""
    if not (isinstance(family, str) and isinstance(table, str) and isinstance(name, str)):
        raise InputError(source, f"nftables[{n}].{kind}: family, table and name must be strings")
    return family, table, name


_CHAIN_HOOK_RE = re.compile(
    r'\{\s*"chain"\s*:\s*\{\s*"family"\s*:\s*"(\w+)"\s*,\s*"table"\s*:\s*"([^"\\]*)"[^{}]*?"hook"\s*:'
)


def hooked_tables(text: str) -> set[tuple[str, str]]:
    """(family, table) of every table with a base chain, found with a regex scan of ``nft -j list ruleset`` text
    (no parse: on an iptables-nft node with 10,000 Services that JSON is tens of MB), for deciding whether a full
    parse is needed at all."""
    return {(m.group(1), m.group(2)) for m in _CHAIN_HOOK_RE.finditer(text)}


# ----------------------------------------------------------------------- rendering (for steps)
def render_value(v) -> str:
    if isinstance(v, dict):
        if "payload" in v:
            p = v["payload"]
            return f"{p.get('protocol', '')} {p.get('field', '')}".strip()
        if "meta" in v:
            return f"meta {v['meta'].get('key')}"
        if "ct" in v:
            return f"ct {v['ct'].get('key')}"
        if "fib" in v:
            return f"fib {' . '.join(v['fib'].get('flags', []))} {v['fib'].get('result')}"
        if "concat" in v:
            return " . ".join(render_value(x) for x in v["concat"])
        if "prefix" in v:
            return f"{v['prefix']['addr']}/{v['prefix']['len']}"
        if "range" in v:
            return f"{render_value(v['range'][0])}-{render_value(v['range'][1])}"
        if "set" in v:
            return "{ " + ", ".join(render_value(x) for x in v["set"]) + " }"
        if "numgen" in v:
            return f"numgen {v['numgen'].get('mode')} mod {v['numgen'].get('mod')}"
        for op in ("&", "|", "^"):
            if op in v:
                a, b = v[op]
                return f"{render_value(a)} {op} {render_value(b)}"
        if "elem" in v:
            return render_value(v["elem"].get("val"))
        for verdict in ("goto", "jump"):
            if verdict in v:
                return f"{verdict} {v[verdict].get('target')}"
        return json.dumps(v, separators=(",", ":"))
    if isinstance(v, list):
        if len(v) == 2 and not isinstance(v[0], list):
            return f"{render_value(v[0])} : {render_value(v[1])}"
        return "{ " + ", ".join(render_value(x) for x in v) + " }"
    return str(v)


def render_rule(expr: list) -> str:
    out = []
    for e in expr:
        if not isinstance(e, dict) or not e:
            continue
        ((k, v),) = list(e.items())[:1]
        if k == "match":
            op = v.get("op", "==")
            left, right = render_value(v.get("left")), render_value(v.get("right"))
            out.append(f"{left} {right}" if op in ("==", "in") else f"{left} {op} {right}")
        elif k == "vmap":
            out.append(f"{render_value(v.get('key'))} vmap {render_value(v.get('data'))}")
        elif k in ("jump", "goto"):
            out.append(f"{k} {v.get('target')}")
        elif k in ("accept", "drop", "return", "continue"):
            out.append(k)
        elif k == "reject":
            out.append(
                "reject" + (f" with {v.get('type')} {v.get('expr')}" if isinstance(v, dict) and v.get("expr") else "")
            )
        elif k == "dnat":
            port = f":{v['port']}" if v.get("port") is not None else ""
            out.append(f"dnat to {render_value(v.get('addr'))}{port}")
        elif k == "snat":
            out.append(f"snat to {render_value(v.get('addr'))}")
        elif k == "masquerade":
            out.append("masquerade" + (f" {v.get('flags')}" if isinstance(v, dict) and v.get("flags") else ""))
        elif k == "mangle":
            out.append(f"{render_value(v.get('key'))} set {render_value(v.get('value'))}")
        elif k == "counter":
            out.append("counter")
        elif k == "set":
            out.append(f"{v.get('op')} {v.get('set')} {{ {render_value(v.get('elem'))} }}")
        else:
            out.append(k if v is None else f"{k} {render_value(v)}")
    return " ".join(out)

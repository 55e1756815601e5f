"""Untrusted JSON and YAML, decoded with bounds on depth, nodes and size.

:func:`load_json` / :func:`load_yaml` refuse documents nested deeper than :data:`MAX_DEPTH` (a ``RecursionError``
deep inside a parser is never the user's answer), and YAML with more than :data:`MAX_YAML_NODES` nodes once its
aliases are expanded or larger than :data:`MAX_YAML_BYTES`."""

from __future__ import annotations

MAX_DEPTH = 200  # nesting levels of JSON/YAML kpdiag decodes; real inputs stay under 20
MAX_YAML_NODES = 50_000  # YAML nodes after alias expansion (a "billion laughs" document is refused); a kubeconfig of
# 50 clusters or a KubeProxyConfiguration has a few thousand
MAX_YAML_BYTES = 1 << 20  # a YAML document kpdiag parses (kube-proxy's config, a kubeconfig) is a few KB


class TooDeep(ValueError):
    pass


_KEEP = b'[]{}"'
_DROP = bytes(c for c in range(256) if c not in _KEEP)
_FOLD = bytes.maketrans(b"{}", b"[]")


def json_too_deep(text: str | bytes, limit: int = MAX_DEPTH) -> bool:
    """Is the JSON text nested deeper than ``limit``? Done at C speed: escaped backslashes and quotes dropped,
    every byte but brackets and quotes deleted, strings cut out, then the innermost pairs peeled, one level a pass."""
    if len(text) < (1 << 16):
        opens = text.count("[") + text.count("{") if isinstance(text, str) else text.count(b"[") + text.count(b"{")
        if opens < limit:
            return False
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    if b"\\" in raw:  # an escaped backslash or quote must not end or start a string
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    # dropping a pair of adjacent quotes keeps every bracket on its side of every string: strings without
    # brackets (nearly all of them) go at C speed, the few left are cut out one by one
    s = raw.translate(None, _DROP).replace(b'""', b"")
    if b'"' in s:
        s = b"".join(s.split(b'"')[0::2])
    s = s.translate(_FOLD)  # '{' and '[' alike: only the depth counts here (mixed-up pairs: the decoder says where)
    for _ in range(limit):  # one level per pass
        t = s.replace(b"[]", b"")
        if t == s or not t:
            return False  # balanced within the limit (or unbalanced: the decoder says where)
        s = t
    return True


def load_json(text: str | bytes, limit: int = MAX_DEPTH, object_pairs_hook=None):
    """json.loads that raises :class:`TooDeep` (a ValueError) for documents nested deeper than ``limit``."""
    if isinstance(text, (bytes, bytearray)):
        text = text.decode("utf-8")
    if json_too_deep(text, limit):
        raise TooDeep(f"nested deeper than {limit} levels: refused")
    import json

    try:
        return json.loads(text, object_pairs_hook=object_pairs_hook)
    except RecursionError:
        raise TooDeep(f"nested deeper than {limit} levels: refused") from None


def raw_decode_json(text: str, start: int, limit: int = MAX_DEPTH):
    """JSONDecoder.raw_decode bounded the same way (the rest of text after the value may be anything)."""
    import json

    try:
        doc, end = json.JSONDecoder().raw_decode(text, start)
    except RecursionError:
        raise TooDeep(f"nested deeper than {limit} levels: refused") from None
    if json_too_deep(text[start:end], limit):
        raise TooDeep(f"nested deeper than {limit} levels: refused")
    return doc, end


def yaml_check(text: str, limit: int = MAX_DEPTH, max_nodes: int = MAX_YAML_NODES) -> None:
    """Raise :class:`TooDeep` for YAML nested deeper than ``limit`` or over ``max_nodes`` with aliases expanded.

    Walks the parser's events (the parser keeps its own stack; only the composer recurses)."""
    import yaml

    depth = 0
    sizes: dict[str, int] = {}
    open_nodes: list[list] = []  # [anchor, count] of each open collection
    total = 0
    events = yaml.parse(text, Loader=_safe_loader())
    while True:
        try:
            ev = next(events, None)
        except yaml.YAMLError as exc:
            if "maximum nesting depth" in str(exc):  # libyaml's own bound on nesting, met before ours
                raise TooDeep(f"nested deeper than {limit} levels: refused") from None
            raise
        if ev is None:
            return
        if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > limit:
                raise TooDeep(f"nested deeper than {limit} levels: refused")
            for o in open_nodes:
                o[1] += 1
            open_nodes.append([ev.anchor, 1])
            total += 1
        elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
            anchor, count = open_nodes.pop()
            if anchor:
                sizes[anchor] = count
        elif isinstance(ev, (yaml.ScalarEvent, yaml.AliasEvent)):
            n = sizes.get(ev.anchor, 1) if isinstance(ev, yaml.AliasEvent) and ev.anchor is not None else 1
            if isinstance(ev, yaml.ScalarEvent) and ev.anchor:
                sizes[ev.anchor] = 1
            for o in open_nodes:
                o[1] += n
            total += n
        if total > max_nodes:
            raise TooDeep(f"more than {max_nodes} nodes once its aliases are expanded: refused")


def _safe_loader():
    """libyaml's safe loader when PyYAML has it (about 10x faster), else the pure-Python one: the same documents."""
    import yaml

    return getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader


def load_yaml(text: str, limit: int = MAX_DEPTH, max_bytes: int = MAX_YAML_BYTES, max_nodes: int = MAX_YAML_NODES):
    """yaml.safe_load that raises :class:`TooDeep` (a ValueError) instead of recursing without end, expanding aliases
    into a billion nodes, or parsing for minutes: a document larger than ``max_bytes`` is refused before any parsing,
    one of more than ``max_nodes`` nodes (aliases expanded) after counting them; yaml.YAMLError for bad YAML."""
    import yaml

    if len(text) > max_bytes:
        raise TooDeep(f"larger than {max_bytes >> 10} KiB (kpdiag's cap on a YAML document): refused, not parsed")
    yaml_check(text, limit, max_nodes)
    try:
        return yaml.load(text, Loader=_safe_loader())
    except RecursionError:
        raise TooDeep(f"nested deeper than {limit} levels: refused") from None

"""Big List files searched, not parsed whole: a v1 List (as ``kubectl get -o json`` prints it) over LAZY_BYTES is
searched for the items one flow needs (:class:`ListScan`); :class:`_ListFile` is one List file of a bundle, parsed whole
when small. For `kpdiag policy` (kpdiag/commands/policy.py FlowSource)."""

from __future__ import annotations

import bisect
import json
import re

from kpdiag.bundle.store import list_items

LAZY_BYTES = 1 << 20  # a List file larger than this is searched for the items a flow needs, not parsed whole
MAX_ITEM_BYTES = 4 << 20
_WS = b" \t\r\n"
_DECODER = json.JSONDecoder()


class ListScan:
    """A v1 List file (as kubectl prints it) searched for the items in which ``"key": value`` occurs, without
    parsing the rest: a regular expression finds the value at C speed, and the item around it — the nearest
    enclosing object that is an element of a list and has a ``metadata`` object — is decoded alone. The caller
    checks that the field really has that value in the item (the text may also occur elsewhere in it)."""

    def __init__(self, raw: bytes):
        self.raw = raw
        self._decoded: dict[int, tuple | None] = {}
        self._newlines: list[int] | None = None

    @staticmethod
    def looks_like_list(raw: bytes) -> bool:
        return raw.lstrip()[:1] == b"{" and raw.rstrip()[-1:] == b"}" and b'"items"' in raw

    def line(self, offset: int) -> int:
        """The line of ``offset``: the file's line starts are found once, then each answer is a bisection (a
        problem per hit on 100,000 hits must not count the newlines from the top each time)."""
        if self._newlines is None:
            raw, found, at = self.raw, [], self.raw.find(b"\n")
            while at >= 0:
                found.append(at)
                at = raw.find(b"\n", at + 1)
            self._newlines = found
        return bisect.bisect_left(self._newlines, offset) + 1

    def _decode(self, start: int):
        if start in self._decoded:
            return self._decoded[start]
        dec = _DECODER
        size, out = 512, None  # grown ×4 while the item is cut short: a small item costs a small read
        while True:
            chunk = self.raw[start : start + size]
            try:
                text = chunk.decode("utf-8")
            except UnicodeDecodeError as exc:
                if exc.start < len(chunk) - 4:
                    break  # not UTF-8 inside: not this way
                text = chunk[: exc.start].decode("utf-8")
            try:
                obj, n = dec.raw_decode(text)
                out = (obj, start + len(text[:n].encode("utf-8")))
                break
            except RecursionError:
                break
            except json.JSONDecodeError as exc:
                cut_short = exc.msg.startswith("Unterminated") or exc.pos >= len(text) - 64
                if not cut_short or start + size >= len(self.raw) or size >= MAX_ITEM_BYTES:
                    break
                size *= 4
        self._decoded[start] = out
        return out

    def _item_around(self, pos: int, before: tuple | None = None):
        """(start, item) of the item around ``pos``, walking back from it. ``before`` is the answer for an earlier
        hit (its position, start, item, end): below that position the walk would only find it again — an item that
        starts before it and ends after ``pos`` holds it too — so the walk stops there (each part of the file is
        walked once however many hits it has: 100,000 small items each holding the value)."""
        c = pos
        for _ in range(10000):
            c = self.raw.rfind(b"{", 0, c)
            if before is not None and c < before[0]:
                if before[1] is None:
                    return None, None
                if before[3] > pos:
                    return before[1], before[2]
                before = None  # an item that holds the earlier hit only: an outer one may hold both, walk on
            if c <= 0:
                return None, None
            j = c - 1
            while j >= 0 and self.raw[j] in _WS:
                j -= 1
            if j < 0 or self.raw[j] not in b"[,":
                continue
            got = self._decode(c)
            if got is None:
                continue
            obj, end = got
            if end > pos and isinstance(obj, dict) and isinstance(obj.get("metadata"), dict):
                return c, obj
        return None, None

    def where(self, key: str, value: str) -> list[tuple[int, dict | None]]:
        """(start, item) of each item where the text ``"key": "value"`` occurs, with or without the blank after the
        colon (item None and start the text's offset: not in an item that can be decoded)."""
        raw = self.raw
        val = json.dumps(value).encode()
        before = re.compile(rb'(?:^|[^\\])"' + re.escape(key.encode()) + rb'"[ \t\r\n]*:[ \t\r\n]*$')
        hits = []
        at = raw.find(val)  # the value, at C speed; then is it this key's?
        while at >= 0:
            if before.search(raw, max(0, at - len(key) - 64), at):
                hits.append(at)
            at = raw.find(val, at + 1)
        out: dict[int, tuple] = {}
        last: tuple | None = None  # the hit before and the item around it
        for pos in sorted(hits):
            start, obj = self._item_around(pos, last)
            got = self._decoded.get(start) if start is not None else None  # decoded: the item and where it ends
            last = (pos, start, obj, got[1] if got is not None else None)
            if start is None:
                out.setdefault(-pos - 1, (pos, None))
            else:
                out.setdefault(start, (start, obj))
        return sorted(out.values(), key=lambda t: t[0])

    def list_metadata(self) -> dict:
        """The List's own metadata (before or after its items), {} when it has none."""
        raw = self.raw
        first, items = raw.find(b'"metadata"'), raw.find(b'"items"')
        candidates = [first] if 0 <= first < items else []
        last = raw.rfind(b'"metadata"')
        if last > items >= 0:
            candidates.append(last)
        for at in candidates:
            k = raw.find(b"{", at)
            got = self._decode(k) if k >= 0 else None
            if got is None or not isinstance(got[0], dict):
                continue
            if at == first and first < items:
                return got[0]
            if raw[got[1] :].strip(_WS) == b"}":
                return got[0]
        return {}


class _ListFile:
    """One List file of the bundle: parsed whole when small, else a :class:`ListScan`."""

    def __init__(
        self, bundle, rel: str, items: list | None = None, scan: ListScan | None = None, meta: dict | None = None
    ):
        self.bundle, self.rel, self.items, self.scan, self.meta = bundle, rel, items, scan, meta or {}

    @classmethod
    def open(cls, bundle, rel: str):
        if not bundle.exists(rel):
            return None
        raw = bundle.read_bytes(rel)
        if raw is None:
            return None
        if len(raw) > LAZY_BYTES and ListScan.looks_like_list(raw):
            scan = ListScan(raw)
            return cls(bundle, rel, scan=scan, meta=scan.list_metadata())
        doc = bundle.read_json(rel)
        if doc is None:
            return None
        if list_items(doc) is None:
            bundle.problem(rel, 'not a Kubernetes List (expected {"items": [...]})')
            return None
        return cls(
            bundle, rel, items=doc["items"], meta=doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
        )

    def where(self, key: str, value: str, check) -> list[tuple]:
        """(where, item) of the items for which ``check(item)`` holds; ``key``/``value`` narrow the search first."""
        if self.scan is None:
            return [(f"item {i}", o) for i, o in enumerate(self.items or ()) if isinstance(o, dict) and check(o)]
        out = []
        why = f'"{key}": {json.dumps(value)} is in no item that can be decoded'
        for start, obj in self.scan.where(key, value):
            if obj is None:
                self.bundle.problem(f"{self.rel}:{self.scan.line(start)}", why)
            elif check(obj):
                out.append((start, obj))
        return out

    def where_text(self, where) -> str:
        """'item N' (a parsed file) or 'line N' (a searched one) for what :meth:`where` returned."""
        if isinstance(where, str) or self.scan is None:
            return str(where)
        return f"line {self.scan.line(where)}"

"""Make untrusted text safe for a terminal: the one place that does it.

kpdiag prints what others wrote: node and pod names, labels, kube-proxy's log, iptables comments, the
reports other nodes send. A terminal acts on some characters instead of showing them: ESC starts a control
sequence (clear the screen, set the window title, OSC 8 hyperlinks), CR and BS overwrite what was printed,
BEL rings, a newline starts a line that looks like kpdiag's own (a fake "No problems found" or a
"$ kubectl delete …" fix), and the Unicode bidirectional overrides and isolates reorder what is shown.

:func:`term` turns each of them into a visible escape (``\\x1b``, ``\\r``, ``\\n``, ``\\u202e``) so the
value is shown, never obeyed. Renderers call it on every value they print; their own layout (newlines
between lines, colour codes) is added afterwards. JSON output needs none of this (JSON escapes controls).
"""

from __future__ import annotations

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}

# bidi embeddings/overrides U+202A–202E, isolates U+2066–2069, and the marks that steer them too
_BIDI = [0x200E, 0x200F, 0x061C] + list(range(0x202A, 0x202F)) + list(range(0x2066, 0x206A))


class _Escapes(dict):
    """code point → its replacement; any other character that is not printable (format characters such as U+FEFF or
    U+200B, separators other than the ASCII space, private use, unassigned) is escaped on first sight too."""

    def __missing__(self, code: int) -> str:
        ch = chr(code)
        value = ch if ch.isprintable() else (f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
        self[code] = value
        return value


def _table() -> dict[int, str]:
    table: dict[int, str] = _Escapes()
    for code in list(range(0x00, 0x20)) + [0x7F] + list(range(0x80, 0xA0)):
        ch = chr(code)
        table[code] = _NAMED.get(ch, f"\\x{code:02x}")
    for code in _BIDI:
        table[code] = f"\\u{code:04x}"
    # line and paragraph separators end a line in some terminals and viewers
    table[0x2028] = "\\u2028"
    table[0x2029] = "\\u2029"
    return table


_TABLE = _table()


def term(value) -> str:
    """``value`` as text with every terminal control shown as a visible escape; one line, always."""
    text = value if isinstance(value, str) else ("" if value is None else str(value))
    if text.isprintable():  # the common case; controls, bidi marks (Cf) and separators (Zl, Zp) are not printable
        return text
    return text.translate(_TABLE)


def term_lines(text: str) -> str:
    """A multi-line block kpdiag built itself (manifests, a list of names): each line escaped, the newlines kept."""
    ends_nl = text.endswith("\n")
    body = text[:-1] if ends_nl else text
    return "\n".join(term(line) for line in body.split("\n")) + ("\n" if ends_nl else "")


def dot_escape(value) -> str:
    """Text for the inside of a Graphviz double-quoted string: controls made visible, then backslashes and quotes
    escaped (a name cannot end the string or start a Graphviz escape such as \\n or \\l)."""
    return term(value).replace("\\", "\\\\").replace('"', '\\"')

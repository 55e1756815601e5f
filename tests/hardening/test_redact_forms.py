"""The redaction spec (docs/redaction.md) is the test: every documented form is redacted exactly as its row says,
nothing it hides survives, and everything the spec says is kept comes out as it went in.

Regenerate the "after" column after a deliberate change:  python tests/hardening/test_redact_forms.py --write
"""

from __future__ import annotations

import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "redaction.md")
SALT = "doc"
_CODE = re.compile(r"`((?:[^`])*)`")


def _cell(text: str) -> str:
    """A table cell's code span as the text it shows: ``\\n`` is a line break, ``\\|`` a pipe."""
    m = _CODE.search(text)
    value = m.group(1) if m else text.strip()
    return value.replace("\\|", "|").replace("\\n", "\n")


def _split_row(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def _table(name: str) -> list[list[str]]:
    text = open(DOC, encoding="utf-8").read()
    body = text.split(f"<!-- {name}:begin -->", 1)[1].split(f"<!-- {name}:end -->", 1)[0]
    rows = [_split_row(line) for line in body.strip().splitlines()]
    return [r for r in rows[2:] if r]


def forms() -> list[dict]:
    out = []
    for cells in _table("forms"):
        ident, what, before, after, hidden = cells
        out.append(
            {
                "id": ident,
                "what": what,
                "before": _cell(before),
                "after": _cell(after) if after else None,
                "hidden": [_cell(h) for h in re.findall(r"`[^`]*`", hidden)],
            }
        )
    return out


def kept() -> list[dict]:
    return [{"id": c[0], "text": _cell(c[2])} for c in _table("kept")]


def redact(text: str) -> str:
    from kpdiag.bundle.redact import Redactor

    return Redactor(salt=SALT).text(text)


def _code(text: str) -> str:
    return "`" + text.replace("\n", "\\n").replace("|", "\\|") + "`"


FORMS = forms()


def test_the_spec_has_every_class_of_the_issue():
    """The classes the spec must cover (issue 23): a row each, and no row without something it hides."""
    ids = {f["id"] for f in FORMS}
    need = {
        "pem", "jwt", "key-equals", "key-colon", "github-token", "bearer-colon", "flag-space", "flag-equals",
        "ipv6-after-word", "ip6-arpa", "ipv6-hex32", "ipv4-leading-zeros", "ipv4-tcpdump", "ipv4-glued",
        "mac-dashes", "mac-cisco", "mac-infiniband", "aws-instance", "aws-arn", "ecr-image", "gcp-project",
        "azure-ids", "json-escaped", "url-encoded", "base64-blob", "ipv6-upper", "ipv6-mapped",
    }  # fmt: skip
    assert need <= ids, need - ids
    assert len(ids) == len(FORMS), "duplicate ids"
    for f in FORMS:
        assert f["hidden"], f"{f['id']}: a row must say what it hides"
        for h in f["hidden"]:
            assert h.lower() in f["before"].lower(), f"{f['id']}: {h!r} is not in its own example"


@pytest.mark.parametrize("form", FORMS, ids=[f["id"] for f in FORMS])
def test_form(form):
    out = redact(form["before"])
    for h in form["hidden"]:
        assert h.lower() not in out.lower(), f"{form['id']}: {h!r} survived in {out!r}"
    assert form["after"] == out, f"docs/redaction.md row {form['id']} says {form['after']!r}; now {out!r}"
    # the same text twice in one redaction gives the same pseudonyms (consistency), and redacting again hides
    # nothing new: a pseudonym is not mistaken for a secret's remains
    assert redact(form["before"] + "\n" + form["before"]) == out + "\n" + out


@pytest.mark.parametrize("item", kept(), ids=[k["id"] for k in kept()])
def test_kept(item):
    assert redact(item["text"]) == item["text"]


def write() -> None:
    text = open(DOC, encoding="utf-8").read()
    head, rest = text.split("<!-- forms:begin -->", 1)
    body, tail = rest.split("<!-- forms:end -->", 1)
    lines = body.strip().splitlines()
    out = lines[:2]
    for line in lines[2:]:
        cells = _split_row(line)
        cells[3] = _code(redact(_cell(cells[2])))
        out.append("| " + " | ".join(cells) + " |")
    with open(DOC, "w", encoding="utf-8") as fh:
        fh.write(head + "<!-- forms:begin -->\n" + "\n".join(out) + "\n<!-- forms:end -->" + tail)


def test_the_spec_names_how_every_source_is_treated():
    """Every source of the catalogue is in the spec's table of sources (by its path or a pattern that covers it), and
    the first row that names it describes the form its declaration says (kpdiag/bundle/sources.py, ``redact``)."""
    import fnmatch

    from kpdiag.bundle import sources

    text = open(DOC, encoding="utf-8").read()
    table = text.split("## Every source, and how it is treated", 1)[1].split("\n## ", 1)[0]
    rows = []
    for row in table.splitlines():
        if not row.startswith("| `"):
            continue
        head, how = row.split(" | ", 1)
        form = (
            "api"
            if how.startswith(("field by field", "as API objects"))
            else "json"
            if how.startswith("JSON, string by string")
            else "text"
            if how.startswith("free text")
            else None
        )
        rows.append((re.findall(r"`([^`]+)`", head), form))
    assert {f for _, f in rows} >= set(sources.REDACT_FORMS), rows
    wrong = []
    for path, src in sources.CATALOGUE.items():
        form = next((f for patterns, f in rows if any(fnmatch.fnmatch(path, p) for p in patterns)), "no row")
        if form != src.redact.form:
            wrong.append(f"{path}: declared {src.redact.form}, the spec says {form}")
    assert not wrong, wrong


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    if sys.argv[1:] == ["--write"]:
        write()
    else:
        print(__doc__)


def _dotted_mapped(original):
    """IPv6Address.__str__ as Python 3.13 writes it: an IPv4-mapped address dotted (::ffff:10.0.0.1)."""

    def text(self):
        n = int(self)
        if n >> 32 == 0xFFFF:
            return "::ffff:" + ".".join(str(n >> s & 255) for s in (24, 16, 8, 0))
        return original(self)

    return text


@pytest.mark.parametrize("form", [f for f in FORMS if f["id"].startswith(("ipv6", "ip6"))], ids=lambda f: f["id"])
def test_the_ipv6_forms_do_not_depend_on_how_python_writes_a_mapped_address(form, monkeypatch):
    """Debian 13's Python (3.13) writes an IPv4-mapped IPv6 address dotted, older ones in hex: the redaction keeps
    the spelling it was given (hex stays hex, dotted stays dotted), whichever Python runs it."""
    import ipaddress

    assert redact(form["before"]) == form["after"]
    monkeypatch.setattr(ipaddress.IPv6Address, "__str__", _dotted_mapped(ipaddress.IPv6Address.__str__))
    assert str(ipaddress.IPv6Address("::ffff:a00:1")) == "::ffff:10.0.0.1"  # the 3.13 spelling, here too
    assert redact(form["before"]) == form["after"], form["id"]


def test_v6_text_is_the_same_on_every_python(monkeypatch):
    import ipaddress

    from kpdiag.parse.addr import int_to_ip, v6_text

    cases = {
        "::ffff:a00:1": ("::ffff:a00:1", "0000:0000:0000:0000:0000:ffff:0a00:0001"),
        "::ffff:0:0": ("::ffff:0:0", "0000:0000:0000:0000:0000:ffff:0000:0000"),
        "2001:db8::1": ("2001:db8::1", "2001:0db8:0000:0000:0000:0000:0000:0001"),
        "::1.2.3.4": ("::102:304", "0000:0000:0000:0000:0000:0000:0102:0304"),
    }
    for patched in (False, True):
        if patched:
            monkeypatch.setattr(ipaddress.IPv6Address, "__str__", _dotted_mapped(ipaddress.IPv6Address.__str__))
        for given, (short, full) in cases.items():
            n = int(ipaddress.IPv6Address(given))
            assert (v6_text(n), v6_text(n, exploded=True), int_to_ip(n, 6)) == (short, full, short), (given, patched)

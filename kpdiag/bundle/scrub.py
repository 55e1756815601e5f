"""Secrets out of every bundle kpdiag writes, with or without ``--redact`` (:func:`scrub_secrets`).

Bearer tokens, JWTs, ``Authorization`` headers, PEM blocks and base64 PEM, ``token:`` / ``password:`` /
``client-key-data:``-style fields, credentials in URLs, container ``env`` values and the
``last-applied-configuration`` annotation of API objects become ``REDACTED``. Texts are handled one bounded piece
at a time (a line, or a part of a long line cut where no secret is split from its key), JSON one string literal at a
time (:func:`json_stream`): redaction is linear in the input. kpdiag/bundle/redact.py builds names and addresses
redaction on top of these passes.
"""

from __future__ import annotations

import functools
import json
import re

from kpdiag.bundle import sources
from kpdiag.parse.decode import load_json

REDACTED = "REDACTED"

# ---------------------------------------------------------------- bounded pieces
# Every pass below works on one piece at a time: a line, and a line longer than PIECE_LIMIT is cut at a space (or,
# lacking one, at punctuation) that splits no secret from its key. Memory is then bounded by the piece, and every
# pattern is linear in it (bounded or possessive quantifiers, fixed look-behinds): redaction is linear in the input.
PIECE_LIMIT = 16 * 1024
_CUT_PUNCT = ",;\"'(){}[]<>|&/"
_SOFT_CUT = re.compile(r"[._=+:-](?![0-9A-Fa-f])|(?<![0-9A-Fa-f])[._=+:-]")
_WORD_RUN = re.compile(r"[^\s,;\"'(){}\[\]<>|&/]{0,1048576}")


def pieces(text: str):
    """``text`` as consecutive pieces (their concatenation is ``text``): whole lines, as many as fit in PIECE_LIMIT;
    a longer line in parts (see :func:`_cut`)."""
    n, i = len(text), 0
    while i < n:
        if n - i <= PIECE_LIMIT:
            yield text[i:]
            return
        j = text.rfind("\n", i, i + PIECE_LIMIT)
        cut = j + 1 if j >= 0 else _cut(text, i, i + PIECE_LIMIT)
        yield text[i:cut]
        i = cut


def _cut(text: str, start: int, hi: int) -> int:
    """Where to end a piece that starts at ``start``: after a space in the upper half of the window, where what
    precedes is not a secret's key (``--token``, ``password:``, ``Bearer``); else after punctuation; else at the
    end of the word run (a run with no space or punctuation is one token, cheap for every pattern)."""
    lo = start + PIECE_LIMIT // 2
    pos = hi
    for _ in range(16):
        sp = max(text.rfind(" ", lo, pos), text.rfind("\t", lo, pos))
        if sp < 0:
            break
        if not _SECRET_TAIL.search(text, max(start, sp - 96), sp + 1):
            return sp + 1
        pos = sp
    best = max(text.rfind(c, lo, hi) for c in _CUT_PUNCT)
    if best >= 0:
        return best + 1
    # a separator inside a word, but not between two digits or hex digits (where it may be inside an address)
    for m in _SOFT_CUT.finditer(text, lo, hi):
        best = m.end()
    if best >= 0:
        return best
    run = _WORD_RUN.match(text, hi)  # (it matches the empty string too)
    end = run.end() if run else hi
    return end if end > hi else hi + 1


# ---------------------------------------------------------------- secrets (always)
# a key or flag whose name says its value is a secret (aws_secret_access_key, client-secret, X-Auth-Token, apiKey,
# --token, tls.key, db_password …), but not one that names a secret kept elsewhere (tokenFile, secretName, …Ref)
_SECRET_WORD = (
    r"secret|token|passw(?:or)?d|pwd|passphrase|credentials?|auth|authorization|cookie|session[-_.]?id|signature|"
    r"api[-_.]?key|apikey|access[-_.]?key|private[-_.]?key|client[-_.]?key|signing[-_.]?key|"
    r"(?<=[-_.])key|(?-i:(?<=[a-z])Key)|client-key-data|client-certificate-data|certificate-authority-data"
)
_SECRET_IN = re.compile(r"(?i:" + _SECRET_WORD + r")")
_NOT_SECRET_KEY = re.compile(
    r"(?i).*(?:name|names|ref|file|path|dir|namespace|type|count|seconds|ttl|expiration|expirationseconds|"
    r"audience|audiences|mode|enabled|kind|size|length|url|uri|endpoint|prefix|suffix)$"
)
_KEY_CHARS = "A-Za-z0-9_.-"
# key, then = or : (maybe URL-encoded), then a value: quoted (JSON-escaped too), or a bare word
_KEYVAL = re.compile(
    r"(?<![" + _KEY_CHARS + r"])(?P<key>\\{0,8}[\"']?(?P<name>[" + _KEY_CHARS + r"]{1,256}+)\\{0,8}[\"']?)"
    r"(?P<sep>[ \t]{0,8}(?:[:=]|%3[AaDd])[ \t]{0,8})"
    r"(?P<value>\\{1,8}\"[^\"\n]{0,4096}?\\{1,8}\"|\"(?:[^\"\\\n]|\\.)*+\"|'[^'\n]*+'"
    r"|(?!(?:true|false|null|REDACTED)\b)(?:[^\s,;&}\]\\\"'%]|%(?!26))++)"
)
_QUOTE = re.compile(r"\\*[\"']|")
# --flag VALUE (a command line): the flag names a secret, the value is the next word
_FLAG = re.compile(
    r"(?<![^\s\"'\[,(])(?P<flag>--?(?P<name>[A-Za-z0-9_.-]{1,256}+))"
    r"(?P<sep>[ \t]{1,8})(?P<value>\"[^\"\n]*+\"|'[^'\n]*+'|(?![-\"'])[^\s\"',]++)"
)
# what precedes a piece cut that would split a secret from its key
_SECRET_TAIL = re.compile(
    r"(?i)(?:(?:" + _SECRET_WORD + r")[" + _KEY_CHARS + r"]{0,64}\\?[\"']?[ \t]*(?:[:=]|%3[ad])?|bearer|basic|"
    r"authorization)[ \t]+$"
)
# XML: <password>VALUE</password>
_XML_SECRET = re.compile(
    r"(<(?P<name>[A-Za-z0-9_.:-]{1,256}+)(?:\s[^<>]{0,256})?>)(?!REDACTED<)[^<]{1,4096}+(</(?P=name)>)"
)
_PEM_B64 = re.compile(r"LS0tLS1CRUdJTi[A-Za-z0-9+/=]*+")  # base64 of "-----BEGIN"
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]{6,}+\.[A-Za-z0-9_-]{6,}+\.[A-Za-z0-9_-]*+")
_BEARER = re.compile(
    r"(?i)\b(bearer|basic)([ \t]*[:=][ \t]*|[ \t]+|%20|\+)(?!REDACTED|(?:bearer|basic)\b)[A-Za-z0-9._~+/=:-]{6,}+"
)
_AUTHZ = re.compile(r"(?i)(\bauthorization[\"']?[ \t]*[:=][ \t]*[\"']?)(?!REDACTED)[^\"'\r\n,}\\]++")
_URL_CRED = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{0,31}://)[^/\s:@\"']{0,256}:[^/\s@\"']{1,256}@")
# tokens recognised by their own prefix (GitHub, GitLab, Slack, AWS access key ids, Google API keys, npm, PyPI,
# Stripe, Kubernetes bootstrap tokens), long base64 blobs (a kubeconfig, a key file)
_PREFIXED = re.compile(
    r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{20,255}+|github_pat_[A-Za-z0-9_]{20,255}+|glpat-[A-Za-z0-9_-]{20,}+"
    r"|xox[abposre]-[A-Za-z0-9-]{10,}+|(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA|ABIA|ACCA)[A-Z0-9]{16}"
    r"|AIza[0-9A-Za-z_-]{35}|npm_[A-Za-z0-9]{36}|pypi-[A-Za-z0-9_-]{50,}+|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}+"
    r")(?![A-Za-z0-9_])"
)
_PREFIXES = (
    "gh", "github_pat_", "glpat-", "xox", "AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA", "ABIA",
    "ACCA", "AIza", "npm_", "pypi-", "sk_", "rk_",
)  # fmt: skip
_BOOTSTRAP = re.compile(r"(?<![A-Za-z0-9_.])[a-z0-9]{6}\.[a-z0-9]{16}(?![A-Za-z0-9_.])")
# the words a secret's key or flag holds, lower case: a piece without any is not searched for keys
_HINTS = (
    "secret",
    "signature",
    "token",
    "passw",
    "pwd",
    "passphrase",
    "credential",
    "auth",
    "cookie",
    "session",
    "key",
    "-data",
)
_B64_BLOB = re.compile(r"(?<![A-Za-z0-9+/=_-])(?!/)[A-Za-z0-9+/]{64,}+={0,2}(?![A-Za-z0-9+/=_-])")
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


@functools.lru_cache(maxsize=8192)
def is_secret_key(name: str) -> bool:
    return len(name) <= 256 and _SECRET_IN.search(name) is not None and not _NOT_SECRET_KEY.match(name)


def secret_value_kept(value: str) -> bool:
    """A value that is no secret though its key says so: empty, a boolean, REDACTED, a file path, a reference."""
    v = value.strip("\\\"'")
    return (
        v in _KEPT_VALUES
        or (v[:1] in "|>" and _BLOCK_INDICATOR.fullmatch(v) is not None)
        or (v.startswith("/") and _PATH.fullmatch(v) is not None)
    )


_KEPT_VALUES = frozenset(("", REDACTED, "true", "false", "null", "[PEM " + REDACTED + "]"))
_BLOCK_INDICATOR = re.compile(r"[|>][-+0-9]{0,3}")
_PATH = re.compile(r"/[A-Za-z0-9_./-]{0,255}")


# YAML: "key: the rest of the line" (a bare value runs to the end of the line), and block scalars ("key: |" then the
# lines indented under it)
_YAML_LINE = re.compile(
    r"(?m)^(?P<key>[ \t]{0,64}+(?:- )?(?P<name>[" + _KEY_CHARS + r"]{1,256}+):[ \t]{1,8}+)"
    r"(?P<value>(?![\"'|>\[{&*!]|REDACTED\s*$)[^\n]*?)(?P<end>[ \t]*(?:\r?\n|$))"
)
_YAML_BLOCK = re.compile(
    r"(?<![" + _KEY_CHARS + r"])(?P<name>[" + _KEY_CHARS + r"]{1,256}+):[ \t]*[|>][-+0-9]{0,3}[ \t]*\r?\n"
)


def scrub_yaml_blocks(text: str) -> str:
    """The lines of a block scalar under a secret's key (``token: |``): every line indented deeper than the key's
    line. Also where the YAML is itself inside a JSON string in a text (its line breaks written ``\\n``)."""
    if ": |" not in text and ": >" not in text and ":|" not in text and ":>" not in text:
        return text
    for nl in ("\n", "\\n", "\\\\n"):
        if nl == "\n" or any(f"{m}{nl}" in text for m in (": |", ": >", ":|", ":>", "|-", ">-")):
            text = _scrub_blocks_nl(text, nl)
    return text


def _scrub_blocks_nl(text: str, nl: str) -> str:
    rx = _YAML_BLOCK if nl == "\n" else _yaml_block_rx(nl)
    out, i = [], 0
    for m in rx.finditer(text):
        if m.start() < i or not is_secret_key(m.group("name")):
            continue
        line_start = max(text.rfind("\n", 0, m.start()), text.rfind(nl, 0, m.start()) + len(nl) - 1) + 1
        head = text[line_start : m.start()]
        depth = len(head) - len(head.lstrip(" \t"))
        j = m.end()
        while j < len(text):
            k = text.find(nl, j)
            line_end = len(text) if k < 0 else k + len(nl)
            line = text[j : line_end - (len(nl) if k >= 0 else 0)]
            if line.strip() and len(line) - len(line.lstrip(" \t")) <= depth:
                break
            if k < 0 and not line.strip():
                break
            q = _END_QUOTE.search(line) if nl != "\n" else None
            if q is not None:  # the JSON string that holds the YAML ends on this line: the block ends with it
                j += q.start()
                break
            j = line_end
        if j > m.end():
            out.append(text[i : m.end()] + " " * (depth + 2) + REDACTED + nl)
            i = j
    out.append(text[i:])
    return "".join(out)


_END_QUOTE = re.compile(r'\\*"')


def _yaml_block_rx(nl: str) -> re.Pattern:
    return re.compile(
        r"(?<!["
        + _KEY_CHARS
        + r"])(?P<name>["
        + _KEY_CHARS
        + r"]{1,256}+):[ \t]*[|>][-+0-9]{0,3}[ \t]*"
        + re.escape(nl)
    )


def _yaml_line(m: re.Match) -> str:
    if not is_secret_key(m.group("name")) or secret_value_kept(m.group("value")) or not m.group("value"):
        return m.group(0)
    return m.group("key") + REDACTED + m.group("end")


def _keyval_scan(text: str) -> str:
    """Every ``key=value`` / ``key: value`` whose key names a secret, value replaced. A key that does not name one
    gives way after its separator: its value is searched in turn (``--note=password=x``, ``msg="{\"token\": …}"``)."""
    out, pos = [], 0
    while True:
        m = _KEYVAL.search(text, pos)
        if m is None:
            break
        value = m.group("value")
        if is_secret_key(m.group("name")) and not secret_value_kept(value):
            q = _QUOTE.match(value)  # (it matches the empty string too)
            quote = q.group(0) if q else ""  # "x", 'x', \"x\", \\\"x\\\" …: the same quotes around REDACTED
            out.append(text[pos : m.start("value")] + quote + REDACTED + quote)
            pos = m.end("value")
        else:
            out.append(text[pos : m.end("sep")])
            pos = m.end("sep")
    out.append(text[pos:])
    return "".join(out)


def _xml(m: re.Match) -> str:
    return m.group(1) + REDACTED + m.group(3) if is_secret_key(m.group("name")) else m.group(0)


def _flag(m: re.Match) -> str:
    if not is_secret_key(m.group("name")) or secret_value_kept(m.group("value")):
        return m.group(0)
    return f"{m.group('flag')}{m.group('sep')}{REDACTED}"


def _b64_blob(m: re.Match) -> str:
    s = m.group(0)
    if s.count("/") * 16 > len(s):  # a path, not base64 (where "/" is one character in 64)
        return s
    mixed = _UPPER.search(s) and _LOWER.search(s) and _DIGIT.search(s)
    return REDACTED if mixed or "+" in s else s


_UPPER, _LOWER, _DIGIT = re.compile("[A-Z]"), re.compile("[a-z]"), re.compile("[0-9]")


_B64_LINE = re.compile(r"[A-Za-z0-9+/=]+\r?")


def _pem_tail(text: str) -> str:
    """A text that begins inside a PEM block (a log's last 2 MB, cut at a byte count): the base64 lines just before
    its first END line, when no BEGIN comes before it, are the rest of the block's body."""
    end = text.find("-----END")
    begin = text.find("-----BEGIN")
    if end < 0 or 0 <= begin < end:
        return text
    start = stop = text.rfind("\n", 0, end) + 1  # the END line's start; the body is the base64 lines before it
    while start > 0:
        prev = text.rfind("\n", 0, start - 1) + 1
        if not _B64_LINE.fullmatch(text, prev, start - 1):
            break
        start = prev
    if text[stop:end].strip() and not _B64_LINE.fullmatch(text[stop:end]):
        return text  # the END is inside another line (quoted, a word in prose): not a block's last line
    close = text.find("-----", end + 8)
    after = close + 5 if 0 <= close - end <= 80 else end + 8
    return text[:start] + "[PEM " + REDACTED + "]" + text[after:]


def scrub_pem(text: str) -> str:
    """PEM blocks (keys, certificates), across lines; a block with no END line is removed to the end of the text, one
    with no BEGIN line (the text begins inside it) from the start of its base64 lines."""
    if "-----END" in text:
        text = _pem_tail(text)
    if "-----BEGIN" not in text:
        return text
    out, i = [], 0
    while True:
        b = text.find("-----BEGIN", i)
        if b < 0:
            break
        e = text.find("-----END", b)
        if e < 0:
            out.append(text[i:b] + "[PEM " + REDACTED + "]")
            return "".join(out)
        close = text.find("-----", e + 8)
        stop = close + 5 if 0 <= close - e <= 80 else e + 8
        out.append(text[i:b] + "[PEM " + REDACTED + "]")
        i = stop
    out.append(text[i:])
    return "".join(out)


# a URL-encoded run (a query string, an encoded path or body): decoded when it decodes to printable ASCII,
# redacted like any text, and encoded again where anything changed
URL_RUN = re.compile(
    r"[A-Za-z0-9._~%/:?#@!$&'()*+,;=-]{0,4096}?%[0-9A-Fa-f]{2}[A-Za-z0-9._~%/:?#@!$&'()*+,;=-]{0,4096}+"
)
_PRINTABLE_ASCII = re.compile(r"[\x20-\x7e\t\n]*")


def url_redo(run: str, fn) -> str | None:
    """``run`` decoded, through ``fn``, encoded again the way it was (what it wrote plainly stays plain); None when
    it does not decode to printable ASCII (then it is no URL-encoding: plain text)."""
    from urllib.parse import quote, unquote

    try:
        decoded = unquote(run, errors="strict")
    except UnicodeDecodeError:
        return None
    if decoded == run or not _PRINTABLE_ASCII.fullmatch(decoded):
        return None
    out = fn(decoded)
    if out == decoded:
        return run
    return quote(out, safe="".join(sorted(set(run) - set("%"))))


def scrub_piece(text: str) -> str:
    """One piece: each pattern tried only where the piece holds what it starts with (ordinary text stays fast)."""
    if "%" in text:
        text = URL_RUN.sub(lambda m: url_redo(m.group(0), scrub_piece) or m.group(0), text)
    if "LS0tLS1CRUdJTi" in text:
        text = _PEM_B64.sub(REDACTED, text)
    if "eyJ" in text:
        text = _JWT.sub(REDACTED, text)
    if any(p in text for p in _PREFIXES):
        text = _PREFIXED.sub(REDACTED, text)
    if "." in text:
        text = _BOOTSTRAP.sub(REDACTED, text)
    text = _B64_BLOB.sub(_b64_blob, text)
    low = text.lower()
    if "authorization" in low:
        text = _AUTHZ.sub(lambda m: m.group(1) + REDACTED, text)
    if "bearer" in low or "basic" in low:
        text = _BEARER.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    if any(h in low for h in _HINTS):
        if ":" in text:
            text = _YAML_LINE.sub(_yaml_line, text)
        text = _keyval_scan(text)
        if "-" in text:
            text = _FLAG.sub(_flag, text)
        if "<" in text:
            text = _XML_SECRET.sub(_xml, text)
    if "@" in text:
        text = _URL_CRED.sub(lambda m: m.group(1) + REDACTED + "@", text)
    return text


def scrub_text(text: str) -> str:
    """Tokens, keys, passwords and certificates out of one text (whatever its format), piece by piece."""
    text = scrub_yaml_blocks(scrub_pem(text))
    if len(text) <= PIECE_LIMIT and "\n" not in text:
        return scrub_piece(text)
    return "".join(scrub_piece(p) for p in pieces(text))


# JSON text, one string literal at a time (decoded, so "\nBearer x" inside a string is a line break and a
# secret, not the word "nBearer"), without building the document: an nftables ruleset is one 100 MB line
_JSON_TOKEN = re.compile(
    r'(?P<nftp>"prefix":\s{0,8}\{\s{0,8}"addr":\s{0,8}")(?P<nftaddr>[0-9A-Fa-f:.]{1,45})(?P<nftmid>",\s{0,8}"len":\s{0,8})'
    r'(?P<nftlen>\d{1,3})|"(?P<s>(?:[^"\\]|\\.)*+)"(?P<colon>\s{0,8}:)?'
)
_SPACE = re.compile(r"\s*")


def json_stream(text: str, value_fn, key_fn=None, prefix_fn=None) -> str:
    """``text`` (JSON) with every string value through ``value_fn`` (decoded, re-encoded), every member name through
    ``key_fn`` (kept when None), a value whose member name names a secret replaced by REDACTED, and nftables'
    ``{"prefix": {"addr": A, "len": N}}`` through ``prefix_fn(A, N)``. Linear; memory bounded by the output."""
    out, buf = [], []
    pos = 0
    secret_key_end = -1  # where the last member name that names a secret ended (its value must follow)
    for m in _JSON_TOKEN.finditer(text):
        buf.append(text[pos : m.start()])
        pos = m.end()
        if m.group("nftp") is not None:
            addr = m.group("nftaddr")
            new = prefix_fn(addr, int(m.group("nftlen"))) if prefix_fn else addr
            buf.append(m.group("nftp") + new + m.group("nftmid") + m.group("nftlen"))
            continue
        raw, colon = m.group("s"), m.group("colon")
        try:
            value = json.loads(f'"{raw}"') if "\\" in raw else raw
        except ValueError:
            value = raw
        if colon:
            new = value if key_fn is None or FIELD.fullmatch(value) else key_fn(value)
            if is_secret_key(value):
                secret_key_end = m.end()
        elif secret_key_end >= 0 and _SPACE.fullmatch(text, secret_key_end, m.start()) and not secret_value_kept(value):
            new = REDACTED
        else:
            new = value_fn(value)
        if not colon:
            secret_key_end = -1
        buf.append(m.group(0) if new == value else json.dumps(new, ensure_ascii=False) + (colon or ""))
        if len(buf) > 8192:
            out.append("".join(buf))
            buf = []
    buf.append(text[pos:])
    out.append("".join(buf))
    return "".join(out)


def scrub_objects(doc) -> bool:
    """API objects and JSON documents, by their keys: container env values, the last-applied annotation (it copies
    env values), and every string under a key that names a secret; True if anything changed."""
    changed = False
    stack = [(None, doc)]
    while stack:
        parent, node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "env" and isinstance(value, list):
                    for var in value:
                        if (
                            isinstance(var, dict)
                            and isinstance(var.get("value"), str)
                            and var["value"] not in ("", REDACTED)
                        ):
                            var["value"] = REDACTED
                            changed = True
                elif key in ("args", "command") and isinstance(value, list):
                    changed = _scrub_arguments(value) or changed
                elif (
                    key == "annotations"
                    and isinstance(value, dict)
                    and value.get(_LAST_APPLIED) not in (None, REDACTED)
                ):
                    value[_LAST_APPLIED] = REDACTED
                    changed = True
                elif (
                    isinstance(value, str)
                    and parent not in LABEL_MAPS  # a label is no secret, and selectors must still match
                    and is_secret_key(key)
                    and not secret_value_kept(value)
                ):
                    node[key] = REDACTED
                    changed = True
                if isinstance(value, (dict, list)):
                    stack.append((key, value))
        elif isinstance(node, list):
            stack.extend((parent, v) for v in node if isinstance(v, (dict, list)))
    return changed


_LONE_FLAG = re.compile(r"--?(?P<name>[A-Za-z0-9_.-]{1,256}+)")


def _scrub_arguments(argv: list) -> bool:
    """A container's arguments: a flag naming a secret, alone in its string (``--db-password``), takes the next
    argument as its value (the flag-space form, split over the list); True if anything changed."""
    changed = False
    for i in range(len(argv) - 1):
        flag, value = argv[i], argv[i + 1]
        if not (isinstance(flag, str) and isinstance(value, str)) or value.startswith("-"):
            continue
        m = _LONE_FLAG.fullmatch(flag)
        if m and is_secret_key(m.group("name")) and not secret_value_kept(value):
            argv[i + 1] = REDACTED
            changed = True
    return changed


def redaction_of(rel: str) -> sources.Redaction:
    """How a file is redacted: as its source declares (kpdiag/bundle/sources.py), else by its name."""
    src = sources.declared(rel)
    return src.redact if src is not None else sources.redaction_for(rel)


def form_of(rel: str) -> str:
    return redaction_of(rel).form


def scrub_secrets(files: dict[str, bytes]) -> dict[str, bytes]:
    """Every file of a bundle without secrets (applied to every bundle kpdiag writes)."""
    out = {}
    for rel, data in files.items():
        if isinstance(data, str):
            data = data.encode()
        text = data.decode("utf-8", "surrogateescape")
        doc = None
        if form_of(rel) == "api":
            try:
                doc = load_json(text)  # a bundle is someone else's: depth-bounded (TooDeep is a ValueError)
            except (ValueError, RecursionError):
                doc = None
        if doc is not None:
            # an API object is scrubbed key by key (env values, the last-applied annotation) and string by string:
            # a secret inside a string never takes a quote with it
            changed = scrub_objects(doc)
            mapped = _map_strings(doc, scrub_text)
            scrubbed = json.dumps(mapped, indent=1) if changed or mapped != doc else text
        elif form_of(rel) != "text" or rel.endswith(".json"):  # node JSON, or an API object that is not valid JSON
            scrubbed = json_stream(text, scrub_text)
        else:
            scrubbed = scrub_text(text)
        out[rel] = scrubbed.encode("utf-8", "surrogateescape")
    return out


def _map_strings(doc, fn):
    if isinstance(doc, str):
        return fn(doc)
    if isinstance(doc, list):
        return [_map_strings(v, fn) for v in doc]
    if isinstance(doc, dict):
        return {k: _map_strings(v, fn) for k, v in doc.items()}
    return doc


# a JSON member name that is a schema's field (kept as it is), not a map key (redacted like text)
FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# the maps whose values are labels: no secret (and selectors must still match), redacted as names
LABEL_MAPS = {"labels", "matchLabels", "selector", "nodeSelector"}

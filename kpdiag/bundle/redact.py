"""Redaction for support bundles.

Two levels:

* :func:`scrub_secrets` — always applied to every bundle kpdiag writes (with or without ``--redact``):
  bearer tokens, JWTs, ``Authorization`` headers, PEM blocks and base64 PEM, ``token:`` / ``password:`` /
  ``client-key-data:``-style fields, credentials in URLs, container ``env`` values and the
  ``last-applied-configuration`` annotation of API objects become ``REDACTED``.
* :class:`Redactor` (``collect --redact``, ``kpdiag redact``) — also every name and address: namespaces,
  Service/Pod/Node names, label and annotation values, port names, host names and FQDNs, MAC addresses and
  every IP address (IPv4, IPv6 compressed/expanded/with a zone, IPv4-mapped, in CIDRs, inside nftables chain
  names, followed by punctuation).

The bundle stays analyzable: the same value gets the same pseudonym in every file, and IP addresses are
mapped by a keyed prefix-preserving permutation (two addresses that share their first N bits still share
them after mapping; an IP stays an IP of the same family; a network address ``a.b.c.0/24`` stays a network
address with the same prefix length). Kept as they are: loopback, unspecified, multicast/broadcast and
netmask-like addresses, the names of kube-system's well-known objects (``kube-system``, ``kube-dns``,
``kubernetes`` …), label and API-group keys under kubernetes.io/k8s.io, and kube-proxy's chain hashes
(KUBE-SVC-…, the 8-character hash of nftables chain names: one-way digests of the Service port name).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import json
import re
import secrets

from kpdiag.bundle import sources
from kpdiag.parse.decode import load_json
from kpdiag.parse.addr import v6_text

REDACTED = "REDACTED"

# ---------------------------------------------------------------- bounded pieces
# Every pass below works on one piece at a time: a line, and a line longer than PIECE_LIMIT is cut at a space (or,
# lacking one, at punctuation) that splits no secret from its key. Memory is then bounded by the piece, and every
# pattern is linear in it (bounded or possessive quantifiers, fixed look-behinds): redaction is linear in the input.
PIECE_LIMIT = 16 * 1024
_CUT_PUNCT = ",;\"'(){}[]<>|&/"
_SOFT_CUT = re.compile(r"[._=+:-](?![0-9A-Fa-f])|(?<![0-9A-Fa-f])[._=+:-]")
_WORD_RUN = re.compile(r"[^\s,;\"'(){}\[\]<>|&/]{0,1048576}")


def _pieces(text: str):
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
def _is_secret_key(name: str) -> bool:
    return len(name) <= 256 and _SECRET_IN.search(name) is not None and not _NOT_SECRET_KEY.match(name)


def _secret_value_kept(value: str) -> bool:
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


def _scrub_yaml_blocks(text: str) -> str:
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
        if m.start() < i or not _is_secret_key(m.group("name")):
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
    if not _is_secret_key(m.group("name")) or _secret_value_kept(m.group("value")) or not m.group("value"):
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
        if _is_secret_key(m.group("name")) and not _secret_value_kept(value):
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
    return m.group(1) + REDACTED + m.group(3) if _is_secret_key(m.group("name")) else m.group(0)


def _flag(m: re.Match) -> str:
    if not _is_secret_key(m.group("name")) or _secret_value_kept(m.group("value")):
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


def _scrub_pem(text: str) -> str:
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
_URL_RUN = re.compile(
    r"[A-Za-z0-9._~%/:?#@!$&'()*+,;=-]{0,4096}?%[0-9A-Fa-f]{2}[A-Za-z0-9._~%/:?#@!$&'()*+,;=-]{0,4096}+"
)
_PRINTABLE_ASCII = re.compile(r"[\x20-\x7e\t\n]*")


def _url_redo(run: str, fn) -> str | None:
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


def _scrub_piece(text: str) -> str:
    """One piece: each pattern tried only where the piece holds what it starts with (ordinary text stays fast)."""
    if "%" in text:
        text = _URL_RUN.sub(lambda m: _url_redo(m.group(0), _scrub_piece) or m.group(0), text)
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
    text = _scrub_yaml_blocks(_scrub_pem(text))
    if len(text) <= PIECE_LIMIT and "\n" not in text:
        return _scrub_piece(text)
    return "".join(_scrub_piece(p) for p in _pieces(text))


# JSON text, one string literal at a time (decoded, so "\nBearer x" inside a string is a line break and a
# secret, not the word "nBearer"), without building the document: an nftables ruleset is one 100 MB line
_JSON_TOKEN = re.compile(
    r'(?P<nftp>"prefix":\s{0,8}\{\s{0,8}"addr":\s{0,8}")(?P<nftaddr>[0-9A-Fa-f:.]{1,45})(?P<nftmid>",\s{0,8}"len":\s{0,8})'
    r'(?P<nftlen>\d{1,3})|"(?P<s>(?:[^"\\]|\\.)*+)"(?P<colon>\s{0,8}:)?'
)
_SPACE = re.compile(r"\s*")


def _json_stream(text: str, value_fn, key_fn=None, prefix_fn=None) -> str:
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
            new = value if key_fn is None or _FIELD.fullmatch(value) else key_fn(value)
            if _is_secret_key(value):
                secret_key_end = m.end()
        elif (
            secret_key_end >= 0 and _SPACE.fullmatch(text, secret_key_end, m.start()) and not _secret_value_kept(value)
        ):
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


def _scrub_objects(doc) -> bool:
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
                    and parent not in _LABEL_MAPS  # a label is no secret, and selectors must still match
                    and _is_secret_key(key)
                    and not _secret_value_kept(value)
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
        if m and _is_secret_key(m.group("name")) and not _secret_value_kept(value):
            argv[i + 1] = REDACTED
            changed = True
    return changed


def _how(rel: str) -> sources.Redaction:
    """How a file is redacted: as its source declares (kpdiag/bundle/sources.py), else by its name."""
    src = sources.declared(rel)
    return src.redact if src is not None else sources.redaction_for(rel)


def _form(rel: str) -> str:
    return _how(rel).form


def scrub_secrets(files: dict[str, bytes]) -> dict[str, bytes]:
    """Every file of a bundle without secrets (applied to every bundle kpdiag writes)."""
    out = {}
    for rel, data in files.items():
        if isinstance(data, str):
            data = data.encode()
        text = data.decode("utf-8", "surrogateescape")
        doc = None
        if _form(rel) == "api":
            try:
                doc = load_json(text)  # a bundle is someone else's: depth-bounded (TooDeep is a ValueError)
            except (ValueError, RecursionError):
                doc = None
        if doc is not None:
            # an API object is scrubbed key by key (env values, the last-applied annotation) and string by string:
            # a secret inside a string never takes a quote with it
            changed = _scrub_objects(doc)
            mapped = _map_strings(doc, scrub_text)
            scrubbed = json.dumps(mapped, indent=1) if changed or mapped != doc else text
        elif _form(rel) != "text" or rel.endswith(".json"):  # node JSON, or an API object that is not valid JSON
            scrubbed = _json_stream(text, scrub_text)
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


# ---------------------------------------------------------------- names
# kube-system's well-known objects: they say nothing about the user, and keep the bundle readable
_SKIP_NAMES = {
    # the CNIs' own devices whose names look like host names (a dot): kept, kpdiag recognises the CNI by them
    "vxlan.calico",
    "vxlan-v6.calico",
    "flannel.1",
    "flannel-v6.1",
    "flannel.4096",
    "default",
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "kubernetes",
    "kube-proxy",
    "kube-dns",
    "coredns",
    "kube-root-ca.crt",
    "localhost",
}
# cluster components (CNI, DNS, control plane): their object names say which software runs, and checks read them
_INFRA = (
    "calico",
    "canal",
    "cilium",
    "weave",
    "antrea",
    "kube-router",
    "kube-network-policies",
    "kube-flannel",
    "flannel",
    "aws-node",
    "aws-eks-nodeagent",
    "aws-network-policy-agent",
    "tigera",
    "coredns",
    "kube-dns",
    "kube-proxy",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "etcd",
    "metrics-server",
    "konnectivity",
    "node-local-dns",
    "nodelocaldns",
    "multus",
    "ovnkube",
    "kindnet",
    "kpdiag",
    "dnsmasq",
    "sidecar",
    "install-cni",
    "upgrade-ipam",
    "mount-bpf-fs",
    "clean-cilium-state",
)
_INFRA_RE = re.compile("(" + "|".join(re.escape(p) for p in _INFRA) + ")(?:-|$)")
# words that are syntax in the files kpdiag writes: a name spelled like one is replaced only where it is a name
_RESERVED = {
    "tcp",
    "udp",
    "sctp",
    "icmp",
    "icmpv6",
    "http",
    "https",
    "dns",
    "nat",
    "filter",
    "mangle",
    "raw",
    "security",
    "input",
    "output",
    "forward",
    "prerouting",
    "postrouting",
    "accept",
    "drop",
    "reject",
    "return",
    "masquerade",
    "snat",
    "dnat",
    "true",
    "false",
    "null",
    "none",
    "local",
    "cluster",
    "ip",
    "ip6",
    "inet",
    "arp",
    "bridge",
    "netdev",
    "node",
    "nodes",
    "service",
    "services",
    "pod",
    "pods",
    "endpoint",
    "endpoints",
    "chain",
    "table",
    "rule",
    "set",
    "map",
    "elem",
    "comment",
    "jump",
    "goto",
    "counter",
    "packets",
    "bytes",
    "family",
    "name",
    "type",
    "handle",
    "hook",
    "prio",
    "policy",
    "mode",
    "iptables",
    "ipvs",
    "nftables",
    "userspace",
    "kernelspace",
    "kube",
    "proxy",
    "metrics",
    "healthz",
    "version",
    "items",
    "metadata",
    "spec",
    "status",
    "kind",
    "list",
    "labels",
    "annotations",
    "selector",
    "ready",
    "serving",
    "terminating",
    "conditions",
    "addresses",
    "ports",
    "port",
    "protocol",
    "targetport",
    "nodeport",
    "clusterip",
    "loadbalancer",
    "externalname",
    "main",
    "eth0",
    "lo",
    "link",
    "global",
    "host",
    "scope",
    "dev",
    "via",
    "src",
    "dst",
    "unicast",
    "broadcast",
    "multicast",
    "blackhole",
    "unreachable",
    "prohibit",
    "error",
    "warning",
    "info",
    "debug",
    "yes",
    "no",
    "on",
    "off",
    "enabled",
    "disabled",
    "running",
    "succeeded",
    "failed",
    "pending",
    "unknown",
    "always",
    "never",
    "ifnotpresent",
    "clusterfirst",
}
_NAME_KEYS = {
    "name",
    "namespace",
    "generateName",
    "nodeName",
    "hostname",
    "subdomain",
    "serviceAccountName",
    "serviceAccount",
    "externalName",
    "secretName",
    "claimName",
    "clusterName",
    "providerID",
    "machineID",
    "systemUUID",
    "bootID",
    "node",
    "priorityClassName",
    "runtimeClassName",
    "schedulerName",
    "service",
}
_LABEL_MAPS = {"labels", "matchLabels", "selector", "nodeSelector"}
_KUBERNETES_DOMAINS = (".kubernetes.io", ".k8s.io", ".x-k8s.io")
# the cloud a Node's providerID names (aws:///ZONE/ID): the scheme is the cloud, not the node, and kept; the rest is
# redacted
_CLOUD_SCHEMES = {
    "aws",
    "azure",
    "gce",
    "openstack",
    "vsphere",
    "digitalocean",
    "hcloud",
    "linode",
    "oci",
    "ibm",
    "kind",
}
_KEEP_DOMAINS = (
    "kubernetes.io",
    "k8s.io",
    "x-k8s.io",
    "golang.org",
    "github.com",
    "go.dev",
    "in-addr.arpa",
    "ip6.arpa",
    "example.invalid",
    "redacted.invalid",
)
# public component registries, and kpdiag's own image as deploy/build-image.sh names it (kpdiag:VERSION[@sha256:…])
_KEEP_IMAGES = (
    "registry.k8s.io/",
    "k8s.gcr.io/",
    "kpdiag:",
    "kpdiag@",
    "docker.io/library/kpdiag:",
    "localhost/kpdiag:",
)
_FILE_EXT = {
    "go",
    "yaml",
    "yml",
    "json",
    "conf",
    "config",
    "txt",
    "log",
    "sh",
    "py",
    "so",
    "ko",
    "gz",
    "tgz",
    "tar",
    "pem",
    "crt",
    "key",
    "sock",
    "pid",
    "cfg",
    "ini",
    "toml",
    "service",
    "socket",
    "mount",
    "d",
    "xml",
    "html",
    "md",
    "lock",
    "bin",
    "out",
    "err",
    "tmp",
    "bak",
    "old",
    "new",
    "status",
    "kubeconfig",
    "c",
    "h",
    "rs",
    "js",
    "timer",
    "target",
    "slice",
    "scope",
    "csv",
    "zst",
    "xz",
    "bz2",
    "deb",
    "rpm",
    "whl",
    "swp",
}
_CLUSTER_SUFFIXES = (".svc.cluster.local", ".cluster.local")

_PCT = re.compile(r"(%[0-9A-Fa-f]{2})")
# possessive: a repeated group keeps no backtracking state (a 10 MB "a-a-a-…" cost 60 bytes per character)
_TOKEN = re.compile(r"(?<![A-Za-z0-9_-])[A-Za-z0-9_]++(?:[-.][A-Za-z0-9_]++)*+")
# ns/name:port (iptables comments, kube-proxy log values, manifest focus)
_NS_NAME_PORT = re.compile(
    r"(?<![A-Za-z0-9_.-])([a-z0-9][a-z0-9-]{0,62})/([a-z0-9][a-z0-9.-]{0,252})(?::([A-Za-z0-9][A-Za-z0-9-]{0,62}))?(?![A-Za-z0-9_-])"
)
# kube-proxy's nftables chain/set names: PREFIX-HASH-ns/name/proto/portname[__ip/port]
_NFT_NAME = re.compile(
    r"(?<![A-Za-z0-9_-])([a-z][a-z-]*)-([A-Z0-9]{8})-([a-z0-9][a-z0-9-]*)/([a-z0-9][a-z0-9.-]*)/(tcp|udp|sctp)/([A-Za-z0-9-]*)"
    r"(?:__(\[?[0-9A-Fa-f:.]+\]?)/(\d+))?"
)
_IPT_COMMENT = re.compile(r'--comment "?([a-z0-9][a-z0-9-]*)/([a-z0-9][a-z0-9.-]*)(?::([A-Za-z0-9-]*))?')
_KLOG_NAME = re.compile(
    r"(?<![A-Za-z0-9_])(service|svc|servicePortName|portName|servicePort_name|node|nodeName|hostname|host|pod|namespace|"
    r'endpointSlice|slice|serviceName)="?([A-Za-z0-9][A-Za-z0-9_.:/-]*)"?'
)
_CONFIG_NAME = re.compile(r"(?m)^\s*(hostnameOverride|nodeName|hostname)\s*:\s*\"?([A-Za-z0-9][A-Za-z0-9_.-]*)\"?\s*$")

# ---------------------------------------------------------------- addresses and cloud ids
# One pass, one pattern: at each place the first alternative that matches wins, so an address is mapped once
# (``::ffff:10.0.0.1`` is an IPv6 address, its IPv4 tail is not mapped a second time). ``run`` is any maximal run of
# hex digits, colons and dots: the code decides what it is (IPv6 in any spelling, IPv4 even with leading zeros or a
# tcpdump port, a MAC, 32 hex digits), trying the spellings a sentence or a tool wraps it in.
_HX = "0-9A-Fa-f"
_AWS_ID_PREFIX = (
    "i|vol|eni|sg|subnet|vpc|ami|snap|rtb|igw|nat|eipalloc|eipassoc|acl|lt|tgw|tgw-attach|vpce|pcx|fs|r|elb|sir|"
    "dopt|vgw|cgw|vpn|eigw|lb|asg|fsap|efs|ebs"
)
_AZ_SEGMENTS = (
    "resourceGroups|virtualMachineScaleSets|virtualMachines|networkInterfaces|virtualNetworks|subnets|"
    "loadBalancers|publicIPAddresses|managedClusters|storageAccounts|vaults|disks|networkSecurityGroups|"
    "routeTables|applicationGateways|privateEndpoints|userAssignedIdentities|registries|agentPools|snapshots|images|"
    "instances|clusters|nodePools|instanceGroups|instanceGroupManagers|networks|subnetworks|serviceAccounts"
)


# each alternative with what a piece must contain for it to be tried (a substring or a cheap search): a piece is
# matched by the alternatives it can hold only, which keeps ordinary bundles fast
def _has(*subs):
    return lambda t: any(x in t for x in subs)


def _search(pattern):
    rx = re.compile(pattern)
    return lambda t: rx.search(t) is not None


_ADDR_ALTS = [
    (
        r'(?P<nftp>"prefix":\s{0,8}\{\s{0,8}"addr":\s{0,8}")(?P<nftaddr>[0-9A-Fa-f:.]{1,45})(?P<nftmid>",\s{0,8}"len":\s{0,8})(?P<nftlen>\d{1,3})',
        _has('"prefix"'),
    ),
    (r"(?P<arpa6>(?<![0-9A-Za-z.])(?:[0-9A-Fa-f]\.){1,32})(?=(?i:ip6\.arpa)\b)", _has("arpa", "ARPA", "Arpa")),
    (r"(?P<arpa4>(?<![0-9A-Za-z.])(?:\d{1,3}\.){1,4})(?=(?i:in-addr\.arpa)\b)", _has("arpa", "ARPA", "Arpa")),
    (
        r"(?P<guid>(?<![0-9A-Za-z-])[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}(?![0-9A-Za-z-]))",
        _search(r"-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-"),
    ),
    (
        r"(?P<macd>(?<![0-9A-Za-z-])[0-9A-Fa-f]{2}(?:-[0-9A-Fa-f]{2}){5,19}(?![0-9A-Za-z-]))",
        _search(r"-[0-9A-Fa-f]{2}-[0-9A-Fa-f]{2}-[0-9A-Fa-f]{2}-"),
    ),
    (
        r"(?P<cisco>(?<![0-9A-Za-z.])[0-9A-Fa-f]{4}\.[0-9A-Fa-f]{4}\.[0-9A-Fa-f]{4}(?![0-9A-Za-z.]))",
        _search(r"\.[0-9A-Fa-f]{4}\.[0-9A-Fa-f]{4}"),
    ),
    (
        r"(?P<dash4>(?<![0-9])(?<!\d-)\d{1,3}-\d{1,3}-\d{1,3}-\d{1,3}(?![0-9])(?!-\d))",
        _search(r"-\d{1,3}-\d{1,3}-\d"),
    ),
    (r"(?P<url6>(?<![0-9A-Za-z%:])[0-9A-Fa-f]{0,4}(?:%3[Aa][0-9A-Fa-f]{0,4}){2,8}(?![0-9A-Za-z]))", _has("%3A", "%3a")),
    (
        r"(?P<img>(?<![/\w.@-])(?:[a-z0-9-]{1,63}\.){1,10}[a-z][a-z0-9-]{0,62}(?::\d{1,5})?/[a-z0-9._/-]{1,255}"
        r"(?::[A-Za-z0-9_.-]{1,128}(?:@sha256:[0-9a-f]{64})?|@sha256:[0-9a-f]{64}))",
        _search(r"\.[a-z][a-z0-9-]{0,62}(?::\d{1,5})?/[a-z0-9._/-]{1,255}[:@]"),
    ),
    (
        r"(?P<awsid>(?<![A-Za-z0-9-])(?:" + _AWS_ID_PREFIX + r")-[0-9a-f]{8,17}(?![A-Za-z0-9-]))",
        _search(r"-[0-9a-f]{8}"),
    ),
    (
        r"(?P<arn>(?<![A-Za-z0-9])arn:aws[a-z-]{0,16}:[a-z0-9-]{0,32}:[a-z0-9-]{0,32}:)(?P<arnacct>\d{12})?:(?P<arnres>[^\s\"',;)\]}]{1,512})",
        _has("arn:aws"),
    ),
    (
        r"(?P<email>(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]{1,64})@(?=[A-Za-z0-9-]{1,63}\.[A-Za-z0-9.-]{0,200}[A-Za-z])",
        _has("@"),
    ),
    (r"(?P<ecr>(?<![0-9A-Za-z])\d{12})(?=\.dkr\.ecr)", _has(".dkr.ecr")),
    (
        r"(?P<acctk>(?i:account|owner)[-_ A-Za-z]{0,12}\\{0,8}[\"']?\s{0,4}[:= ]\s{0,4}\\{0,8}[\"']?)(?P<acct>\d{12})(?!\d)",
        _search(r"\d{12}"),
    ),
    (
        r"(?P<gce>gce://)(?P<gceproj>[^/\s\"']{1,64})/(?P<gcezone>[^/\s\"']{1,64})/(?P<gcename>[^/\s\"',;]{1,128})",
        _has("gce://"),
    ),
    (
        r"(?P<gcp>(?<![A-Za-z0-9_.-])(?:projects/|(?:[a-z]{2,4}\.)?gcr\.io/|[a-z0-9-]{2,40}-docker\.pkg\.dev/))(?P<gproj>[a-z][a-z0-9-]{4,28}[a-z0-9])(?![A-Za-z0-9_-])",
        _has("projects/", "gcr.io/", "docker.pkg.dev/"),
    ),
    (
        r"(?P<az>/(?i:" + _AZ_SEGMENTS + r")/)(?P<azname>[^/\s\"',;]{1,128})",
        _search(r"(?i)/(?:" + _AZ_SEGMENTS + r")/"),
    ),
    (
        r"(?P<run>(?<![0-9A-Fa-f:.])(?=[:.]?[0-9A-Fa-f]{0,4}[:.][0-9A-Fa-f:.]|[0-9A-Fa-f]{32})[0-9A-Fa-f:.]++)(?P<zone>%[A-Za-z0-9_.-]{1,32})?(?:/(?P<plen>\d{1,3})(?!\d))?",
        None,
    ),
]
_ADDR_CACHE: dict[tuple, re.Pattern] = {}
_TOP_GROUPS = [m.group(1) for p, _ in _ADDR_ALTS if (m := re.match(r"\(\?P<(\w+)>", p))]  # each names its group


def _addr_regex(text: str) -> re.Pattern:
    """The address pattern for ``text``: the alternatives it can hold, in their order (the first to match wins)."""
    key = tuple(t is None or t(text) for _, t in _ADDR_ALTS)
    rx = _ADDR_CACHE.get(key)
    if rx is None:
        rx = _ADDR_CACHE[key] = re.compile("|".join(p for (p, _), on in zip(_ADDR_ALTS, key) if on))
    return rx


_CACHE_MAX = 200_000  # entries of a redaction cache (cleared when full: memory stays bounded)
_RUN_MAX = 64  # a longer run of hex digits, colons and dots is no address (at most 45 characters)
_MAC_COLON = re.compile(r"[0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2}){5,19}")
_HEX32 = re.compile(r"[0-9A-Fa-f]{32}")
_CISCO = re.compile(r"[0-9A-Fa-f]{4}\.[0-9A-Fa-f]{4}\.[0-9A-Fa-f]{4}")
_V4_IN = re.compile(r"(?<![0-9])\d{1,3}(?:\.\d{1,3}){3}(?![0-9])")
_VERBATIM = {
    "schema",
    "format",
    "apiVersion",
    "kind",
    "kpdiag_version",
    "created",
    "creationTimestamp",
    "resourceVersion",
}
_DNS_NAME = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.){1,127}[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?"
)
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_UID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_ADDRLIKE = re.compile(r"[0-9A-Fa-f:.]{2,45}(?:%[A-Za-z0-9_.-]{1,32})?(?:/\d{1,3})?")
# the values a schema field (kind, apiVersion, format, timestamps, versions) holds: kept as they are; anything else
# under such a key is treated like any other string
_VERBATIM_SHAPE = re.compile(
    r"[A-Za-z][A-Za-z0-9.-]{0,62}(?:/[A-Za-z0-9.-]{1,32})?|\d{4}-\d\d-\d\d(?:[T ][0-9:.]{1,20}(?:Z|[+-]\d\d:?\d\d)?)?"
    r"|v?\d{1,6}(?:\.\d{1,6}){0,3}(?:[-+][A-Za-z0-9.-]{1,40})?"
)


def _verbatim_ok(v: str) -> bool:
    return _VERBATIM_SHAPE.fullmatch(v) is not None and not _V4_IN.search(v)


class Redactor:
    def __init__(self, salt: str | None = None):
        self.salt = salt or secrets.token_hex(8)
        self._key = hashlib.sha256(f"kpdiag-redact:{self.salt}".encode()).digest()
        self.names: dict[str, str] = {}  # original → pseudonym (names, label values, hosts)
        self._pseudonyms: set[str] = set()
        self._learning = False
        self.global_names: set[str] = set()  # the names also replaced in free text
        self.ports: dict[str, str] = {}
        self.ips: dict[str, str] = {}  # the addresses replaced: original → pseudonym
        self._ipcache: dict[str, str] = {}
        self._runcache: dict[str, str] = {}  # a run of hex digits, colons and dots → its redaction
        self._tokcache: dict[tuple, str] = {}
        self._settled: set[str] = (
            set()
        )  # names whose free-text standing (global or not) is decided  # a word → its redaction (after learning, it is a function of the word)
        self.macs: dict[str, str] = {}
        self.not_copied: list[str] = []  # "FILE: why": files left out of the redacted copy
        self._bits: dict[tuple, int] = {}
        ordinary = [o for o in range(1, 224) if o not in (127, 169)]
        shuffled = sorted(ordinary, key=lambda o: self._h(f"octet:{o}"))
        self._octet = dict(zip(ordinary, shuffled))

    def _h(self, text: str, n: int = 8) -> str:
        return hmac.new(self._key, text.encode("utf-8", "surrogateescape"), hashlib.sha256).hexdigest()[:n]

    # ------------------------------------------------------------ names
    def name(self, value: str, *, free_text: bool = True) -> str:
        """The pseudonym of a name (the same for a namespace, object, node or label value spelled alike)."""
        hit = self.names.get(value)
        if hit is not None and not self._learning and (not free_text or value in self._settled):
            return hit  # the common case: a name seen before
        if not value or value in _SKIP_NAMES or value == REDACTED or value in self._pseudonyms:
            return value
        infra = self._infra(value)
        if infra is not None:
            return infra
        if "." in value and value.lower().rstrip(".").endswith(_KUBERNETES_DOMAINS):
            return value  # Kubernetes' own component names (endpointslice-controller.k8s.io): no one's, kept
        if "." in value and len(value) <= 253 and _DNS_NAME.fullmatch(value) and not _looks_numeric(value):
            # a host name / FQDN: its labels are names (ndots and the search list count them); the TLD stays
            low = value.lower().rstrip(".")
            suffix = next((sfx for sfx in _CLUSTER_SUFFIXES if low.endswith(sfx)), None)
            head = value[: len(value) - len(suffix)].split(".") if suffix else value.rstrip(".").split(".")[:-1]
            for label in head:
                self.name(label, free_text=free_text)
            return value if self._learning else self.host(value)
        if value not in self.names:
            self.names[value] = f"r{self._h('name:' + value)}"
            self._pseudonyms.add(self.names[value])
        if free_text and value not in self._settled:
            if _global_ok(value):
                self.global_names.add(value)
                self._tokcache.clear()  # a word's redaction may change with a new name
            self._settled.add(value)
        return self.names[value]

    def _infra(self, value: str) -> str | None:
        """A component's name as it is — but a node name inside it (etcd-NODE, kube-proxy-NODE) redacted."""
        m = _INFRA_RE.match(value)
        if m is None:
            return None
        prefix = m.group(1)
        if value == prefix:
            return value
        rest = value[len(prefix) + 1 :]
        return f"{prefix}-{self.names[rest]}" if rest in self.names else value

    def port(self, value: str) -> str:
        if not value or value == REDACTED:
            return value
        if value not in self.ports:
            self.ports[value] = f"p{self._h('port:' + value, 6)}"
        return self.ports[value]

    def host(self, value: str) -> str:
        """A host name or FQDN that is not a known name: a pseudonym under .redacted.invalid."""
        if value in _SKIP_NAMES:
            return value
        if value in self.names:
            return self.names[value]
        low = value.lower().rstrip(".")
        if low in ("svc.cluster.local", "cluster.local"):
            return value
        for suffix in _CLUSTER_SUFFIXES:  # web.shop.svc.cluster.local: the Service and namespace, not the suffix
            if low.endswith(suffix):
                head = value[: len(value) - len(suffix)]
                return ".".join(self.name(p) for p in head.split(".")) + value[len(head) :]
        if value not in self.names:
            # label by label (a name keeps its number of dots: resolv.conf's ndots counts them), the top-level domain kept
            labels = value.split(".")
            out = [
                self.names[p] if p in self.global_names else f"h{self._h('label:' + p.lower(), 7)}" for p in labels[:-1]
            ]
            last = self.names[labels[-1]] if labels[-1] in self.global_names else labels[-1]  # web.shop: shop too
            self.names[value] = ".".join(out + [last])
            self._pseudonyms.add(self.names[value])
        return self.names[value]

    # ------------------------------------------------------------ addresses
    def _bit(self, tag: str, i: int, prefix: int) -> int:
        key = (tag, i, prefix)
        b = self._bits.get(key)
        if b is None:
            b = hmac.new(self._key, f"{tag}:{i}:{prefix}".encode(), hashlib.sha256).digest()[0] & 1
            self._bits[key] = b
        return b

    def _permute(self, value: int, nbits: int, keep: int, tag: str) -> int:
        """Prefix-preserving: bit i flips by a keyed function of the bits before it; the first ``keep`` bits stay."""
        out = value
        for i in range(keep, nbits):
            if self._bit(tag, i, value >> (nbits - i)):
                out ^= 1 << (nbits - 1 - i)
        return out

    def _v4(self, a: int) -> tuple[int, int]:
        """(mapped address, bits kept as they are)."""
        o = a >> 24
        if o in (0, 127) or o >= 224:
            return a, 32
        low = self._permute(a & 0xFFFFFF, 24, 0, f"4:{o}")
        return ((self._octet.get(o, o) << 24) | low), (8 if o == 169 else 0)

    def _v6(self, a: int) -> tuple[int, int]:
        if a in (0, 1) or a >> 120 == 0xFF:  # ::, ::1, multicast
            return a, 128
        if (
            a >> 32 in (0, 0xFFFF) or a >> 32 == 0x0064FF9B << 64
        ):  # IPv4-compatible, IPv4-mapped, NAT64: the IPv4 inside
            v4, keep = self._v4(a & 0xFFFFFFFF)
            return (a & ~0xFFFFFFFF) | v4, 96 + keep
        for prefix_len, prefix in ((10, 0x3FA), (7, 0x7E), (3, 0x1)):  # link-local, ULA, global unicast
            if a >> (128 - prefix_len) == prefix:
                keep = 64 if prefix_len == 10 else prefix_len
                return self._permute(a, 128, keep, f"6:{prefix}"), keep
        return self._permute(a, 128, 16, "6:other"), 16

    def ip(self, value: str, prefixlen: int | None = None) -> str:
        """An IP address (maybe with a zone), or a network when ``prefixlen`` is given and the host bits are zero."""
        zone = ""
        if "%" in value:
            value, zone = value.split("%", 1)
            zone = "%" + zone
        key = value if prefixlen is None else f"{value}/{prefixlen}"
        if key in self._ipcache:
            return self._ipcache[key] + zone
        try:
            addr = ipaddress.ip_address(value)
        except ValueError:
            return value + zone
        nbits = addr.max_prefixlen
        mapped, kept = (self._v4 if addr.version == 4 else self._v6)(int(addr))
        if prefixlen is not None and prefixlen <= nbits:
            hostmask = (1 << (nbits - prefixlen)) - 1
            if (
                int(addr) & hostmask == 0
            ):  # a network address: stays one (or stays as it is when shorter than what is kept)
                mapped = int(addr) if prefixlen < kept else mapped & ~hostmask
        if addr.version == 4:
            text = str(ipaddress.IPv4Address(mapped))
        elif ":" in value and value.count(":") == 7 and "::" not in value and len(value) == 39:
            text = v6_text(mapped, exploded=True)
        elif "." in value and mapped >> 32 == 0xFFFF:  # written dotted, stays dotted (hex stays hex: v6_text)
            text = "::ffff:" + str(ipaddress.IPv4Address(mapped & 0xFFFFFFFF))
        else:
            text = v6_text(mapped)
        if value.isupper() if any(c.isalpha() for c in value) else False:
            text = text.upper()
        self._ipcache[key] = text
        if text != value:
            self.ips[key] = text
        return text + zone

    def mac(self, value: str) -> str:
        """A hardware address of any length (Ethernet 6 bytes, EUI-64 8, InfiniBand 20) with ``:`` or ``-`` between
        bytes, or Cisco's dotted ``aabb.ccdd.eeff``: a keyed pseudonym of the same length and spelling."""
        digits = re.sub(r"[^0-9A-Fa-f]", "", value).lower()
        raw = bytes.fromhex(digits)
        if raw == b"\0" * len(raw) or raw == b"\xff" * len(raw):
            return value
        if digits not in self.macs:
            h = b""
            i = 0
            while len(h) < len(raw):
                h += hmac.new(self._key, f"mac:{i}:{digits}".encode(), hashlib.sha256).digest()
                i += 1
            h = h[: len(raw)]
            if len(raw) in (6, 8):
                h = bytes([(h[0] & 0xFC) | 0x02]) + h[1:]  # locally administered, unicast
            self.macs[digits] = h.hex()
        out = self.macs[digits]
        if "." in value:
            text = ".".join(out[i : i + 4] for i in range(0, len(out), 4))
        else:
            sep = "-" if "-" in value else ":"
            text = sep.join(out[i : i + 2] for i in range(0, len(out), 2))
        return text.upper() if value.isupper() else text

    def uid(self, value: str) -> str:
        """A UUID/GUID (object uids, Azure subscriptions and tenants, boot ids): a keyed UUID, the same everywhere."""
        h = self._h("uid:" + value.lower(), 32)
        out = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
        return out.upper() if value.isupper() else out

    def account(self, value: str) -> str:
        """A 12-digit AWS account id: 12 keyed digits."""
        return str(int(self._h("account:" + value, 16), 16) % 10**12).zfill(12)

    def _hex32(self, value: str) -> str:
        """32 hex digits: an IPv6 address as /proc/net/if_inet6 and ipv6_route write it (mapped like any address),
        or a machine id or digest (then a keyed pseudonym: no prefix is kept)."""
        a = int(value, 16)
        mapped, kept = self._v6(a)
        if kept >= 128 and not (a < 2 or (a >> 120 == 0xFF and a & ((1 << 112) - 1) < 1 << 16)):
            mapped = int(self._h("hex32:" + value.lower(), 32), 16)
        out = f"{mapped:032x}"
        return out.upper() if value.isupper() else out

    def _v4_text(self, parts: list[str], plen: str | None = None) -> str:
        """Four decimal octets as written (leading zeros kept as zero padding): mapped like any IPv4 address."""
        canon = ".".join(str(int(p)) for p in parts)
        mapped = self.ip(canon, int(plen) if plen else None).split(".")
        return ".".join(o.zfill(len(p)) if len(p) > 1 and p.startswith("0") else o for o, p in zip(mapped, parts))

    def _v4_run(self, run: str, plen: str | None) -> str | None:
        """Dotted decimal: 4 octets (an address), 5 (tcpdump's host.port), 6 or more (each four in turn)."""
        parts = run.split(".")
        if not all(p.isdigit() for p in parts) or len(parts) < 4:
            return None
        if any(int(p) > 255 or len(p) > 3 for p in parts[:4]):
            return None
        if len(parts) == 4:
            return self._v4_text(parts, plen) + (f"/{plen}" if plen else "")
        out = [self._v4_text(parts[:4])]
        rest = parts[4:]
        while len(rest) >= 4 and all(len(p) <= 3 and int(p) <= 255 for p in rest[:4]):
            out.append(self._v4_text(rest[:4]))
            rest = rest[4:]
        return ".".join(out + rest) + (f"/{plen}" if plen else "")

    def _v6_text(self, raw: str, zone: str, plen: str | None) -> str | None:
        try:
            ipaddress.IPv6Address(raw)
        except ValueError:
            return None
        return self.ip(raw + zone, int(plen) if plen and int(plen) <= 128 else None) + (f"/{plen}" if plen else "")

    def _run(self, m: re.Match) -> str:
        whole = m.group(0)
        out = self._runcache.get(whole)
        if out is None:
            if len(self._runcache) > _CACHE_MAX:
                self._runcache.clear()
            out = self._runcache[whole] = self._run_uncached(m)
        return out

    def _run_uncached(self, m: re.Match) -> str:
        whole, run = m.group(0), m.group("run")
        zone, plen = m.group("zone") or "", m.group("plen")
        rest = whole[len(run) :]
        if len(run) > _RUN_MAX:
            return REDACTED + rest if run.count(":") + run.count(".") >= 4 else whole
        # what wraps an address in a sentence or a tool's output: "addr:fd00::1", "x.10.0.0.1", "fd00::1:" at the end
        lead = ""
        while run[:1] in (":", ".") and not run.startswith("::"):
            lead, run = lead + run[0], run[1:]
        trail = ""
        while run[-1:] in (":", ".") and not run.endswith("::") and not (zone or plen):
            run, trail = run[:-1], run[-1] + trail
        if not run:
            return whole
        if (_MAC_COLON.fullmatch(run) or _CISCO.fullmatch(run)) and not (zone or plen):
            return lead + self.mac(run) + trail
        if ":" in run:
            out = self._v6_text(run, zone, plen)
            if out is None and "." in run:  # tcpdump's fd00::1.53: the address, then the port
                addr, _, port = run.rpartition(".")
                if port.isdigit() and (v6 := self._v6_text(addr, "", None)) is not None:
                    return lead + v6 + "." + port + trail + rest
            if out is None and ":" in run:  # host:port, a timestamp …: any IPv4 inside it still mapped
                return lead + _V4_IN.sub(lambda v: self._v4_run(v.group(0), None) or v.group(0), run) + trail + rest
            return whole if out is None else lead + out + trail
        if "." in run:
            out = self._v4_run(run, plen)
            if out is None:  # glued to hex letters (a10.0.0.1, 10.0.0.1ab): the address inside
                inner = _V4_IN.sub(lambda v: self._v4_run(v.group(0), None) or v.group(0), run)
                return lead + inner + trail + rest
            return lead + out + trail + (zone if zone else "")
        if _HEX32.fullmatch(run):
            return lead + self._hex32(run) + trail + rest
        return whole

    def _arpa(self, nibbles: str, v6: bool) -> str:
        """A reverse-DNS name's address part (ip6.arpa nibbles, in-addr.arpa octets), mapped as the network it
        names: the same prefix of the same mapped address, written the same way."""
        labels = nibbles.rstrip(".").split(".")
        if v6:
            n = len(labels)
            value = int("".join(reversed(labels)).ljust(32, "0"), 16)
            mapped = self.ip(v6_text(value), 4 * n if n < 32 else None)
            hexs = f"{int(ipaddress.IPv6Address(mapped)):032x}"[:n]
            if nibbles.isupper():
                hexs = hexs.upper()
            return ".".join(reversed(hexs)) + "."
        if any(int(o) > 255 for o in labels):
            return nibbles
        n = len(labels)
        octets = list(reversed(labels)) + ["0"] * (4 - n)
        parts = self.ip(".".join(str(int(o)) for o in octets), 8 * n if n < 4 else None).split(".")[:n]
        return ".".join(reversed(parts)) + "."

    def _addr_sub(self, m: re.Match) -> str:
        if m.lastgroup in ("run", "zone", "plen"):
            return self._run(m)
        gd = m.groupdict()
        g = next(k for k in _TOP_GROUPS if gd.get(k) is not None)
        if g == "nftp":  # nft -j writes a network as {"prefix": {"addr": A, "len": N}}
            addr, plen = m.group("nftaddr"), int(m.group("nftlen"))
            return m.group("nftp") + self.ip(addr, plen) + m.group("nftmid") + m.group("nftlen")
        if g == "run":
            return self._run(m)
        if g == "arpa6":
            return self._arpa(m.group(0), True)
        if g == "arpa4":
            return self._arpa(m.group(0), False)
        if g == "img":
            return self._image(m.group(0))
        if g == "guid":
            return self.uid(m.group(0))
        if g in ("macd", "cisco"):
            return self.mac(m.group(0))
        if g == "dash4":
            parts = m.group(0).split("-")
            if any(int(p) > 255 for p in parts):
                return m.group(0)
            return "-".join(self._v4_text(parts).split("."))
        if g == "url6":
            raw = re.sub("%3[Aa]", ":", m.group(0))
            out = self._v6_text(raw, "", None)
            return m.group(0) if out is None else out.replace(":", "%3A")
        if g == "awsid":
            prefix, _, rest = m.group(0).rpartition("-")
            return f"{prefix}-{self._h('awsid:' + m.group(0), len(rest))}"
        if g == "arn":
            acct = m.group("arnacct")
            res = m.group("arnres")
            kind, sep, name = res.partition("/") if "/" in res else res.partition(":")
            res_out = f"{kind}{sep}{self.name(name, free_text=False)}" if sep else self.name(res, free_text=False)
            return m.group("arn") + (self.account(acct) if acct else "") + ":" + res_out
        if g == "email":  # the mailbox; its domain is a host name (the host pass that follows)
            local = m.group("email")
            return (local if local == REDACTED else f"u{self._h('email:' + local.lower())}") + "@"
        if g == "ecr":
            return self.account(m.group(0))
        if g == "acctk":
            return m.group("acctk") + self.account(m.group("acct"))
        if g == "gce":
            return (
                f"gce://{self.name(m.group('gceproj'), free_text=False)}/{m.group('gcezone')}/"
                f"{self.name(m.group('gcename'), free_text=False)}"
            )
        if g == "gcp":
            return m.group("gcp") + self.name(m.group("gproj"), free_text=False)
        if g == "az":
            name = m.group("azname")
            return m.group("az") + (name if name.isdigit() else self.name(name, free_text=False))
        return m.group(0)

    # ------------------------------------------------------------ learning what to hide
    def learn(self, files: dict[str, bytes]) -> None:
        self._learning = True
        try:
            self._learn(files)
        finally:
            self._learning = False

    def _learn(self, files: dict[str, bytes]) -> None:
        manifest = _json(files.get("kpdiag.json"))
        if isinstance(manifest, dict):
            if manifest.get("node"):
                self.name(str(manifest["node"]))
            focus = manifest.get("service")
            if isinstance(focus, str) and "/" in focus:
                for part in focus.split("/"):
                    self.name(part)
        for rel, data in files.items():
            if _form(rel) == "api":
                doc = _json(data)
                if doc is not None:
                    self._learn_doc(doc)
        for rel, data in files.items():
            text = data.decode("utf-8", "surrogateescape") if isinstance(data, bytes) else data
            for m in _NFT_NAME.finditer(text):
                self.name(m.group(3))
                self.name(m.group(4))
                self.port(m.group(6))
            for m in _IPT_COMMENT.finditer(text):
                self.name(m.group(1))
                self.name(m.group(2))
                self.port(m.group(3) or "")
            if _how(rel).klog_names:
                for m in _KLOG_NAME.finditer(text):
                    value = m.group(2)
                    if "/" in value:
                        ns, _, rest = value.partition("/")
                        name, _, port = rest.partition(":")
                        self.name(ns)
                        self.name(name)
                        self.port(port)
                    elif not _looks_numeric(value):
                        self.name(value.split(":", 1)[0])
                for m in _CONFIG_NAME.finditer(text):
                    self.name(m.group(2))

    def _learn_doc(self, doc) -> None:
        stack = [(None, doc)]
        while stack:
            key, node = stack.pop()
            if isinstance(node, dict):
                is_port = any(k in node for k in ("port", "containerPort", "targetPort"))
                for k, v in node.items():
                    if isinstance(v, str):
                        if k == "name" and is_port:
                            self.port(v)
                        elif k == "targetPort":
                            self.port(v)
                        elif k in _NAME_KEYS and key not in ("env",):
                            self.name(v)
                    elif k in _LABEL_MAPS and isinstance(v, dict):
                        for lv in v.values():
                            if isinstance(lv, str):
                                self.name(lv)
                    elif k == "annotations" and isinstance(v, dict):
                        for av in v.values():
                            if isinstance(av, str):
                                self.name(av, free_text=False)
                    elif k == "addresses" and isinstance(v, list):
                        for a in v:
                            if (
                                isinstance(a, dict)
                                and a.get("type") in ("Hostname", "InternalDNS", "ExternalDNS")
                                and isinstance(a.get("address"), str)
                            ):
                                self.name(a["address"])
                    if isinstance(v, (dict, list)):
                        stack.append((k, v))
            elif isinstance(node, list):
                stack.extend((key, v) for v in node if isinstance(v, (dict, list)))

    # ------------------------------------------------------------ applying it
    def text(self, text: str, hosts: bool = True) -> str:
        """Secrets, nftables names, ns/name:port, addresses, MACs, host names and learned names out of a text."""
        text = _scrub_yaml_blocks(_scrub_pem(text))
        if len(text) <= PIECE_LIMIT and "\n" not in text:
            return self._piece(text, hosts)
        return "".join(self._piece(p, hosts) for p in _pieces(text))

    def _piece(self, text: str, hosts: bool) -> str:
        if "%" not in text:
            return self._plain(text, hosts)
        out, pos = [], 0
        for m in _URL_RUN.finditer(text):  # a URL-encoded run is redacted decoded, once (never mapped twice)
            run = m.group(0)
            out.append(self._plain(text[pos : m.start()], hosts))
            redone = _url_redo(run, lambda t: self.text(t, hosts))
            out.append(self._plain(run, hosts) if redone is None else redone)
            pos = m.end()
        out.append(self._plain(text[pos:], hosts))
        return "".join(out)

    def _plain(self, text: str, hosts: bool) -> str:
        if not text:
            return text
        text = _scrub_piece(text)
        if "/" in text:
            text = _NFT_NAME.sub(self._nft_sub, text)
            text = _NS_NAME_PORT.sub(self._ns_sub, text)
        text = _addr_regex(text).sub(self._addr_sub, text)
        if "%" in text:  # URL-encoded: %2F and its kind separate words (…%2Fnamespaces%2Fshop%2F…)
            parts = _PCT.split(text)
            return "".join(p if i % 2 else _TOKEN.sub(lambda m: self._token(m, hosts), p) for i, p in enumerate(parts))
        return _TOKEN.sub(lambda m: self._token(m, hosts), text)

    def _nft_sub(self, m: re.Match) -> str:
        out = f"{m.group(1)}-{m.group(2)}-{self.name(m.group(3))}/{self.name(m.group(4))}/{m.group(5)}/{self.port(m.group(6))}"
        if m.group(7):  # the endpoint's address: left to the address pass that follows (mapped once)
            out += "__" + m.group(7) + "/" + m.group(8)
        return out

    def _ns_sub(self, m: re.Match) -> str:
        ns, name, port = m.group(1), m.group(2), m.group(3)
        if ns not in self.names and ns not in _SKIP_NAMES:
            return m.group(0)
        if name not in self.names and name not in _SKIP_NAMES:
            return m.group(0)
        return f"{self.name(ns)}/{self.name(name)}" + (f":{self.port(port)}" if port else "")

    def _token(self, m: re.Match, hosts: bool) -> str:
        t = m.group(0)
        if "." not in t and "_" not in t:
            return self.names[t] if t in self.global_names else t
        key = (t, hosts)
        out = self._tokcache.get(key)
        if out is None:
            if len(self._tokcache) > _CACHE_MAX:
                self._tokcache.clear()
            out = self._tokcache[key] = self._token_uncached(t, hosts)
        return out

    def _token_uncached(self, t: str, hosts: bool) -> str:
        if t in self.global_names:
            return self.names[t]
        if "_" in t and "." not in t:  # a name inside an identifier: shop_web-frontend, cali_shop_…
            parts = t.split("_")
            if any(p in self.global_names for p in parts):
                return "_".join(self.names[p] if p in self.global_names else p for p in parts)
            return t
        if "." not in t or t in _SKIP_NAMES:
            return t
        parts = t.split(".")
        if t in self._pseudonyms:
            return t
        if "-" in t and t.startswith(_INFRA):
            return self._infra(t) or t
        if all(p in self.global_names for p in parts) or (hosts and _fqdn_like(parts) and not _kept_domain(t)):
            return self.host(t)
        if any(p in self.global_names for p in parts):
            return ".".join(self.names[p] if p in self.global_names else p for p in parts)
        return t

    def json_doc(self, doc, key=None):
        """An API object / report / manifest, field by field."""
        if isinstance(doc, dict):
            is_port = any(k in doc for k in ("port", "containerPort", "targetPort"))
            out = {}
            for k, v in doc.items():
                if k == "managedFields":
                    continue
                if key in _LABEL_MAPS or key == "annotations":
                    nk = self._label_key(k)
                else:  # a field name stays (a key spelled like a name — "client" — is the schema's); map keys are redacted
                    nk = k if _FIELD.fullmatch(k) else self.text(k)
                if isinstance(v, str):
                    if k in _VERBATIM and key not in _LABEL_MAPS and key != "annotations" and _verbatim_ok(v):
                        out[nk] = self.names.get(v, v)
                    elif key in _LABEL_MAPS:
                        out[nk] = self.name(v)
                    elif key == "annotations":
                        out[nk] = self.name(v, free_text=False)
                    elif _is_secret_key(k) and not _secret_value_kept(v):
                        out[nk] = REDACTED
                    elif (k == "name" and is_port) or k == "targetPort":
                        out[nk] = self.port(v)
                    elif k == "uid":
                        out[nk] = self.uid(v) if _UID.match(v) else f"u{self._h('uid:' + v, 12)}"
                    elif k in ("image", "imageID"):
                        out[nk] = self._image(v)
                    elif k == "providerID" and v.split("://", 1)[0] in _CLOUD_SCHEMES and "://" in v:
                        scheme, rest = v.split("://", 1)
                        out[nk] = f"{scheme}://" + "/".join(self.name(p) if p else "" for p in rest.split("/"))
                    elif (
                        k in _NAME_KEYS and key != "env" and v and not _looks_numeric(v) and not _ADDRLIKE.fullmatch(v)
                    ):
                        if "/" in v:  # a Service focus, NS/NAME
                            out[nk] = "/".join(self.name(p) for p in v.split("/"))
                        else:
                            out[nk] = self.name(v)
                    elif v in self.names:
                        out[nk] = self.names[v]
                    else:
                        out[nk] = self.text(v)
                elif k == "names" and "sizeBytes" in doc and isinstance(v, list):  # a Node's status.images
                    out[nk] = [self._image(x) if isinstance(x, str) else self.json_doc(x, k) for x in v]
                else:
                    out[nk] = self.json_doc(v, k)
            return out
        if isinstance(doc, list):
            return [self.json_doc(v, key) for v in doc]
        if isinstance(doc, str):
            return (
                self.names[doc] if doc in self.names else self.text(doc)
            )  # a whole value equal to a name is that name
        return doc

    def _label_key(self, k: str) -> str:
        prefix, slash, rest = k.rpartition("/")
        if not slash or prefix.lower().endswith(_KEEP_DOMAINS):
            return k
        return f"{self.host(prefix) if '.' in prefix else self.name(prefix)}/{rest}"

    def _image(self, v: str) -> str:
        """An image reference (a container's image or imageID, a Node's status.images): public component registries
        and kpdiag's own image kept; else the registry and repository replaced by one keyed name, the tag kept."""
        scheme = ""
        if "://" in v:  # imageID: docker-pullable://REPO@sha256:…
            scheme, v = v.split("://", 1)
            scheme += "://"
        if re.fullmatch(r"sha256:[0-9a-f]{64}", v) or v.startswith(_KEEP_IMAGES):
            return scheme + v
        repo = v.split("@", 1)[0].rsplit("/", 1)[-1]
        if repo.startswith(_INFRA):  # a component's image: its name and tag kept, the registry not
            return f"{scheme}registry.redacted.invalid/{repo}"
        tag = ""
        base = v.split("@", 1)[0]
        if ":" in base.rsplit("/", 1)[-1]:
            tag = ":" + base.rsplit(":", 1)[1]
            base = base.rsplit(":", 1)[0]
        if not re.fullmatch(r"[A-Za-z0-9_.-]{0,128}", tag[1:]):
            tag = ""
        return f"{scheme}registry.redacted.invalid/i{self._h('image:' + base)}{tag}"

    def files(self, files: dict[str, bytes]) -> dict[str, bytes]:
        files = {k: (v.encode() if isinstance(v, str) else v) for k, v in files.items()}
        self.learn(files)
        out = {}
        for rel, data in files.items():
            if _wide_or_binary(data):  # UTF-16/32 or binary: a secret in it is not text the patterns can see
                self.not_copied.append(f"{rel}: not UTF-8 text (UTF-16, UTF-32 or binary), so it is left out")
                continue
            text = data.decode("utf-8", "surrogateescape")
            form = "api" if rel == "kpdiag.json" else _form(rel)
            doc = _json(data) if form == "api" else None
            if doc is None and form == "api" and data.strip():
                # its names are learned from its structure only: as text, every name in it would survive
                self.not_copied.append(f"{rel}: {_json_error(data)}: its names cannot be told, so it is left out")
                continue
            if doc is not None:
                _scrub_objects(doc)
                red = self.json_doc(doc)
                out[rel] = json.dumps(red, indent=1).encode("utf-8", "surrogateescape")
            elif form != "text" or rel.endswith(".json"):
                out[rel] = _json_stream(text, self.text, self.text, self.ip).encode("utf-8", "surrogateescape")
            else:
                out[rel] = self.text(text).encode("utf-8", "surrogateescape")
        return {self.path(rel): data for rel, data in out.items()}

    def path(self, rel: str) -> str:
        """A file's name in the bundle: a declared source's as it is; any other (a hand-made bundle's extra files)
        redacted like text, part by part."""
        if rel in sources.CATALOGUE or rel == "kpdiag.json":
            return rel
        return "/".join(self.text(part) for part in rel.split("/"))


def _global_ok(value: str) -> bool:
    return (
        3 <= len(value) <= 253
        and value.lower() not in _RESERVED
        and any(c.isalpha() for c in value)
        and re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", value) is not None
    )


def _looks_numeric(value: str) -> bool:
    return (
        re.fullmatch(r"[0-9.:/\[\]a-fA-F%-]*", value) is not None
        and any(c.isdigit() for c in value)
        and not re.search(r"[g-zG-Z]", value)
    )


_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def _fqdn_like(parts: list[str]) -> bool:
    last = parts[-1]
    if len(parts) < 2 or not last.isalpha() or not all(_LABEL.fullmatch(p) for p in parts):
        return False
    return (  # one letter case throughout (DNS ignores case: DB01.ACME.COM is a host name too)
        len(last) >= 2
        and (all(p == p.lower() for p in parts) or all(p == p.upper() for p in parts))
        and last.lower() not in _FILE_EXT
        and any(c.isalpha() for c in parts[0])
        and parts[0].lower() not in ("net", "kernel", "vm", "fs", "dev", "user", "abi", "debug")
    )


def _kept_domain(t: str) -> bool:
    low = t.lower()
    return any(low == d or low.endswith("." + d) for d in _KEEP_DOMAINS)


def _json_error(data: bytes) -> str:
    try:
        load_json(data)
    except UnicodeDecodeError as exc:
        return f"not UTF-8 (byte {exc.object[exc.start]:#04x} at offset {exc.start})"
    except (ValueError, RecursionError) as exc:
        return f"not JSON ({str(exc)[:120]})"
    return "not JSON"


def _json(data: bytes | None):
    if not data:
        return None
    try:
        return load_json(data)
    except (ValueError, RecursionError):
        return None


def _wide_or_binary(data: bytes) -> bool:
    """UTF-16/32 (a byte-order mark, or NULs between the characters) or binary: one byte in eight or more a NUL. A
    few stray NULs (a log padded after a crash) leave a text a text."""
    if data[:4] in (b"\xff\xfe\0\0", b"\0\0\xfe\xff") or data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return True
    return data.count(b"\0") * 8 >= len(data) > 0


def redact_files(files: dict[str, bytes], salt: str | None = None) -> tuple[dict[str, bytes], Redactor]:
    r = Redactor(salt)
    return r.files(files), r

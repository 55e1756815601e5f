"""Parser for ``iptables-save`` output and ``iptables-restore`` input.

Two phases, so that a 225,000-line ruleset is cheap to load:

1. :func:`parse_iptables_save` reads every line once, validates the file's structure
   (tables, chain headers, quoting, COMMIT) and files each rule's raw text under its chain.
   Errors name the file and line.
2. A chain's rules are tokenized and structured (:class:`Rule`) the first time something
   asks for them (:meth:`Chain.rule_at`, :attr:`Chain.rules`). :meth:`Ruleset.compile_all` does all chains at once
   (for checks that want every rule, and to surface every error).

Both kube-proxy's restore form (``-m tcp -p tcp -d 1.2.3.4 --dport 80``, ``--or-mark``) and
the kernel's canonical form (``-d 1.2.3.4/32 -p tcp -m tcp --dport 80``, ``--set-xmark``)
are accepted. Unknown modules and targets are kept verbatim.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ..errors import InputError
from .addr import Prefix, parse_prefix

TABLES = ("raw", "mangle", "nat", "filter", "security")
BUILTIN_CHAINS = {
    "raw": ("PREROUTING", "OUTPUT"),
    "mangle": ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"),
    "nat": ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"),
    "filter": ("INPUT", "FORWARD", "OUTPUT"),
    "security": ("INPUT", "FORWARD", "OUTPUT"),
}

# a quoted string in the "unrolled loop" form: linear in time and memory (the alternation form, (?:[^"\\]|\\.)*,
# costs the regex engine a backtracking frame per character: ~140 bytes a character of a long comment)
_TOKEN_RE = re.compile(r'"([^"\\]*(?:\\.[^"\\]*)*)"|(\S+)')
_UNESCAPE_RE = re.compile(r"\\(.)")


@dataclass(slots=True)
class Opt:
    """One ``--option [args…]`` of a match or target; ``neg`` when preceded/followed by ``!``."""

    name: str
    args: tuple[str, ...]
    neg: bool = False

    @property
    def value(self) -> str:
        return self.args[0] if self.args else ""


@dataclass(slots=True)
class Match:
    """``-m module`` with its options (``implicit`` for ``-p tcp --dport`` without ``-m``)."""

    module: str
    opts: list[Opt] = field(default_factory=list)
    implicit: bool = False

    def get(self, name: str) -> Opt | None:
        for opt in self.opts:
            if opt.name == name:
                return opt
        return None


@dataclass(slots=True)
class Rule:
    table: str
    chain: str
    index: int  # 1-based position in its chain
    lineno: int
    text: str
    source: str = ""
    src: Prefix | None = None
    src_neg: bool = False
    dst: Prefix | None = None
    dst_neg: bool = False
    proto: str | None = None
    proto_neg: bool = False
    iif: str | None = None
    iif_neg: bool = False
    oif: str | None = None
    oif_neg: bool = False
    frag: bool | None = None
    matches: list[Match] = field(default_factory=list)
    target: str | None = None
    target_opts: list[Opt] = field(default_factory=list)
    goto: bool = False
    counters: tuple[int, int] | None = None

    def target_opt(self, name: str) -> Opt | None:
        for opt in self.target_opts:
            if opt.name == name:
                return opt
        return None

    def match(self, module: str) -> Match | None:
        for m in self.matches:
            if m.module == module:
                return m
        return None

    @property
    def comment(self) -> str | None:
        m = self.match("comment")
        if m is None:
            return None
        opt = m.get("--comment")
        return opt.value if opt else None

    @property
    def where(self) -> str:
        return f"{self.source}:{self.lineno}"


class Chain:
    """A chain: policy (built-in chains), counters, and its rules (each compiled on first use)."""

    __slots__ = ("table", "name", "policy", "counters", "lineno", "linenos", "_all", "_rules", "_source", "errors")

    def __init__(
        self, table: str, name: str, policy: str | None, counters, lineno: int, source: str, all_lines: list[str]
    ):
        self.table = table
        self.name = name
        self.policy = policy  # None for user-defined chains
        self.counters = counters
        self.lineno = lineno
        self.linenos: list[int] = []  # 1-based line numbers of this chain's rules, in order
        self._all = all_lines  # the whole file's lines, shared by every chain
        self._rules: list[Rule | None] | None = None
        self._source = source
        self.errors: dict[int, InputError] = {}  # position → why that rule could not be read

    @property
    def lines(self) -> list[str]:
        """The raw texts of this chain's rules, in order."""
        all_lines = self._all
        return [all_lines[n - 1] for n in self.linenos]

    @property
    def builtin(self) -> bool:
        return self.policy is not None

    def __len__(self) -> int:
        return len(self.linenos)

    def rule_at(self, pos: int) -> Rule:
        """The rule at 0-based ``pos``, structured on first use (raises :class:`InputError`)."""
        rules = self._rules
        if rules is None:
            rules = self._rules = [None] * len(self.linenos)
        rule = rules[pos]
        if rule is None:
            err = self.errors.get(pos)
            if err is not None:
                raise err
            lineno = self.linenos[pos]
            try:
                rule = rules[pos] = parse_rule(
                    self._all[lineno - 1], self.table, self.name, pos + 1, lineno, self._source
                )
            except InputError as exc:
                self.errors[pos] = exc
                raise
        return rule

    @property
    def rules(self) -> list[Rule]:
        """Every rule that could be read (see :attr:`errors` for the others)."""
        out = []
        for pos in range(len(self.linenos)):
            try:
                out.append(self.rule_at(pos))
            except InputError:
                pass
        return out


@dataclass
class Table:
    name: str
    chains: dict[str, Chain] = field(default_factory=dict)
    lineno: int = 0


@dataclass
class Ruleset:
    """All tables of one ``iptables-save``; ``family`` is 4 or 6."""

    source: str
    tables: dict[str, Table] = field(default_factory=dict)
    family: int = 4
    line_count: int = 0
    rule_count: int = 0
    header_comments: list[str] = field(default_factory=list)

    def chain(self, table: str, name: str) -> Chain | None:
        t = self.tables.get(table)
        return t.chains.get(name) if t else None

    def compile_all(self) -> list[InputError]:
        """Structure every rule; return every error (the chain keeps the rules that parsed)."""
        errors: list[InputError] = []
        for table in self.tables.values():
            for chain in table.chains.values():
                chain.rules  # noqa: B018 — compiles, recording errors per position
                errors.extend(chain.errors[k] for k in sorted(chain.errors))
        return errors

    def iter_rules(self) -> Iterator[Rule]:
        for table in self.tables.values():
            for chain in table.chains.values():
                yield from chain.rules

    def chain_names(self, table: str) -> list[str]:
        t = self.tables.get(table)
        return list(t.chains) if t else []

    @property
    def empty(self) -> bool:
        return not self.tables


def _tokenize(text: str, source: str, lineno: int) -> list[str]:
    # Not shlex: iptables-save quotes with double quotes only (a ' in a comment is a plain character; shlex would open
    # a quote at it), and shlex reads a character at a time in Python — several times slower over the 170,000 rules of
    # 10,000 Services. An unbalanced quote is an error naming the line.
    if '"' not in text:
        return text.split()
    tokens = []
    for m in _TOKEN_RE.finditer(text):
        quoted, bare = m.group(1), m.group(2)
        if quoted is not None:
            tokens.append(_UNESCAPE_RE.sub(r"\1", quoted))
        else:
            if '"' in bare:
                raise InputError(source, f"unbalanced quote in: {_short(text)}", lineno)
            tokens.append(bare)
    return tokens


def _short(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


_ADDR_OPTS = {"-s": "src", "--source": "src", "--src": "src", "-d": "dst", "--destination": "dst", "--dst": "dst"}
_IFACE_OPTS = {"-i": "iif", "--in-interface": "iif", "-o": "oif", "--out-interface": "oif"}
_Err = Callable[[str], InputError]  # an error naming the rule's line
_START = ("-A", "--append", "-I", "--insert")
_JUMP = ("-j", "--jump", "-g", "--goto")


def _is_option(tok: str) -> bool:
    return len(tok) > 1 and tok[0] == "-" and not tok[1].isdigit()


def _set_addr(rule: Rule, tok: str, arg: str, neg: bool, err: _Err) -> None:
    try:
        prefix = parse_prefix(arg)
    except ValueError as exc:
        raise err(str(exc)) from None
    if _ADDR_OPTS[tok] == "src":
        rule.src, rule.src_neg = prefix, neg
    else:
        rule.dst, rule.dst_neg = prefix, neg


def _set_proto(rule: Rule, tok: str, arg: str, neg: bool, err: _Err) -> None:
    rule.proto, rule.proto_neg = arg.lower(), neg


def _set_iface(rule: Rule, tok: str, arg: str, neg: bool, err: _Err) -> None:
    if _IFACE_OPTS[tok] == "iif":
        rule.iif, rule.iif_neg = arg, neg
    else:
        rule.oif, rule.oif_neg = arg, neg


# the rule's own options of one argument: token → (the error when the argument is missing, how it is set)
_RULE_OPTS = {
    **{tok: ("{tok} needs an address", _set_addr) for tok in _ADDR_OPTS},
    "-p": ("-p needs a protocol", _set_proto),
    "--protocol": ("-p needs a protocol", _set_proto),
    **{tok: ("{tok} needs an interface", _set_iface) for tok in _IFACE_OPTS},
}


# the rule's own long options: any other ``--option`` belongs to the current match or target
_RULE_LONG = frozenset(
    tok
    for tok in (*_RULE_OPTS, "--fragment", "--match", "--jump", "--goto", "--set-counters", "--ipv4", "--ipv6")
    if tok.startswith("--")
)


def _rule_start(toks: list[str], rule: Rule, err: _Err) -> int:
    """Past the leading ``[packets:bytes]`` and ``-A CHAIN`` (``-I CHAIN [N]``): the index of the first option."""
    n = len(toks)
    i = 0
    if n and toks[0].startswith("[") and toks[0].endswith("]"):
        p, _, b = toks[0][1:-1].partition(":")
        try:
            rule.counters = (int(p), int(b))
        except ValueError:
            raise InputError(rule.source, f"bad counters {toks[0]!r}", rule.lineno) from None
        i = 1
    if i >= n or toks[i] not in _START:
        raise err("expected -A CHAIN")
    i += 2  # chain name already known
    if toks[i - 2] in ("-I", "--insert") and i < n and toks[i].isascii() and toks[i].isdigit():
        i += 1
    return i


def _option(toks: list[str], i: int, neg: bool) -> tuple[Opt, int]:
    """The ``--option`` at ``i`` with its arguments (a ``!`` before an argument negates it, old syntax: ``--dport !
    80``), and the index past them."""
    n = len(toks)
    j = i + 1
    args = []
    opt_neg = neg
    while j < n:
        t = toks[j]
        if t == "!":
            if j + 1 < n and _is_option(toks[j + 1]):
                break  # negates the next option
            opt_neg = True
            j += 1
            continue
        if len(t) > 1 and t[0] == "-" and not t[1].isdigit():  # _is_option, inline: once per argument
            break
        args.append(t)
        j += 1
    return Opt(toks[i], tuple(args), opt_neg), j


def _match_opt(rule: Rule, opt: Opt, err: _Err) -> Match:
    """The match ``opt`` starts when no ``-m`` came before it: ``-p tcp --dport 80`` is the protocol's, implicit."""
    if not rule.proto or rule.proto_neg:
        raise err(f"option {opt.name} outside any -m module")
    context = Match(rule.proto, implicit=True, opts=[opt])
    rule.matches.append(context)
    return context


def _counters(toks: list[str], i: int, err: _Err) -> tuple[int, int]:
    if i + 2 >= len(toks):
        raise err("-c needs packets and bytes")
    try:
        return int(toks[i + 1]), int(toks[i + 2])
    except ValueError:
        raise err("bad -c counters") from None


def parse_rule(text: str, table: str, chain: str, index: int, lineno: int, source: str) -> Rule:
    """Structure one ``-A CHAIN …`` line (raises :class:`InputError` naming the line)."""
    toks = _tokenize(text, source, lineno)
    rule = Rule(table=table, chain=chain, index=index, lineno=lineno, text=text, source=source)

    def err(msg: str) -> InputError:
        return InputError(source, f"{msg}: {_short(text)}", lineno)

    n = len(toks)
    i = _rule_start(toks, rule, err)
    neg = False
    context: Match | None = None
    in_target = False
    while i < n:
        tok = toks[i]
        if tok[:2] == "--" and tok not in _RULE_LONG:  # an option of the current module / target: most tokens
            opt, i = _option(toks, i, neg)
            neg = False
            if in_target:
                rule.target_opts.append(opt)
            elif context is not None:
                context.opts.append(opt)
            else:
                context = _match_opt(rule, opt, err)
            continue
        if tok == "!":
            neg = True
            i += 1
            continue
        one = _RULE_OPTS.get(tok)
        if one is not None:
            if i + 1 >= n:
                raise err(one[0].format(tok=tok))
            one[1](rule, tok, toks[i + 1], neg, err)
            neg = False
            i += 2
        elif tok in ("-f", "--fragment"):
            rule.frag = not neg
            neg = False
            i += 1
        elif tok in ("-m", "--match"):
            if neg:
                raise err("'!' cannot negate -m")
            if i + 1 >= n:
                raise err("-m needs a module name")
            context = Match(toks[i + 1])
            rule.matches.append(context)
            in_target = False
            i += 2
        elif tok in _JUMP:
            if i + 1 >= n:
                raise err(f"{tok} needs a target")
            if rule.target is not None:
                raise err("more than one target")
            rule.target, rule.goto = toks[i + 1], tok in ("-g", "--goto")
            in_target, context = True, None
            i += 2
        elif tok in ("-c", "--set-counters"):
            rule.counters = _counters(toks, i, err)
            i += 3
        elif tok in ("-4", "--ipv4", "-6", "--ipv6"):
            i += 1
        else:
            raise err(f"unexpected {tok!r}")
    if neg:
        raise err("'!' at the end of the rule")
    return rule


def _decode(data: bytes | str, source: str) -> str:
    if isinstance(data, str):
        text = data
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            raise InputError(source, f"not text (byte 0x{data[exc.start]:02x} is not UTF-8)", line) from None
    nul = text.find("\x00")
    if nul >= 0:
        raise InputError(source, "not text (contains a NUL byte)", text.count("\n", 0, nul) + 1)
    return text


def _rule_chain(line: str, source: str, lineno: int) -> str:
    """The chain a rule line other than the plain ``-A NAME …`` appends to (``[p:b] -A``, ``--append``, ``-I``)."""
    parts = line.split(None, 3)
    k = 1 if line[0] == "[" else 0
    if len(parts) < k + 2 or parts[k] not in _START:
        raise InputError(source, f"expected '-A CHAIN …': {_short(line)}", lineno)
    return parts[k + 1]


def _declare_chain(line: str, table: Table, source: str, lineno: int, lines: list[str]) -> Chain:
    """The chain a ``:NAME POLICY [p:b]`` line declares in ``table``."""
    if line.endswith(" - [0:0]"):  # the common user-chain form, fast
        name = line[1:-8]
        if name and " " not in name and name not in BUILTIN_CHAINS[table.name]:
            return Chain(table.name, name, None, None, lineno, source, lines)
    parts = line[1:].split()
    if not parts:
        raise InputError(source, "empty chain declaration", lineno)
    name = parts[0]
    policy = parts[1] if len(parts) > 1 else "-"
    counters = None
    if len(parts) > 2 and parts[2].startswith("[") and parts[2] != "[0:0]":
        try:
            p, _, b = parts[2][1:-1].partition(":")
            counters = (int(p), int(b))
        except ValueError:
            raise InputError(source, f"bad chain counters {parts[2]!r}", lineno) from None
    if policy not in ("-", "ACCEPT", "DROP"):
        raise InputError(source, f"bad policy {policy!r} for chain {name}", lineno)
    builtin = name in BUILTIN_CHAINS[table.name]
    if builtin and policy == "-":
        policy = "ACCEPT"  # restore input: "-" keeps the kernel's policy, ACCEPT by default
    if not builtin and policy != "-":
        raise InputError(source, f"user chain {name} cannot have policy {policy}", lineno)
    return Chain(table.name, name, policy if builtin else None, counters, lineno, source, lines)


def _start_table(line: str, rs: Ruleset, table: Table | None, source: str, lineno: int) -> Table:
    """The table a ``*NAME`` line starts."""
    if table is not None:
        raise InputError(source, f"table {line[1:]!r} starts before table {table.name} was COMMITted", lineno)
    name = line[1:].strip()
    if name not in TABLES:
        raise InputError(source, f"unknown table {name!r} (expected one of {', '.join(TABLES)})", lineno)
    if name in rs.tables:
        raise InputError(source, f"table {name} appears twice", lineno)
    return Table(name, lineno=lineno)


def parse_iptables_save(data: bytes | str, source: str = "iptables-save") -> Ruleset:
    """Parse a whole ``iptables-save`` / ``iptables-restore`` file (phase 1: structure only)."""
    text = _decode(data, source)
    rs = Ruleset(source=source)
    table: Table | None = None
    chains: dict[str, Chain] = {}
    lineno = 0
    rule_count = 0
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for lineno, line in enumerate(lines, 1):
        if not line:
            continue
        c = line[0]
        if c == "-" or c == "[":  # a rule: the hot path, inline
            if table is None:
                raise InputError(source, "rule outside any table (no '*table' line before it)", lineno)
            if '"' in line and line.count('"') & 1 and (line.count('"') - line.count('\\"')) & 1:
                raise InputError(source, f"unbalanced quote in: {_short(line)}", lineno)
            if line.startswith("-A "):
                sp = line.find(" ", 3)
                name = line[3:sp] if sp > 0 else line[3:]
            else:
                name = _rule_chain(line, source, lineno)
            chain = chains.get(name)
            if chain is None:
                raise InputError(source, f"rule for chain {name!r}, which table {table.name} does not declare", lineno)
            chain.linenos.append(lineno)
            rule_count += 1
        elif c == ":":
            if table is None:
                raise InputError(source, "chain declaration outside any table", lineno)
            chain = _declare_chain(line, table, source, lineno, lines)
            chains[chain.name] = chain
        elif c == "*":
            table = _start_table(line, rs, table, source, lineno)
            chains = table.chains
        elif c == "#":
            if table is None:
                rs.header_comments.append(line)
        elif line.strip() == "COMMIT":
            if table is None:
                raise InputError(source, "COMMIT outside any table", lineno)
            rs.tables[table.name] = table
            table = None
        elif line.strip():
            raise InputError(source, f"unexpected line: {_short(line)}", lineno)
    if table is not None:
        raise InputError(
            source,
            f"truncated: table {table.name} (line {table.lineno}) has no COMMIT before the end of the file",
            lineno,
        )
    rs.line_count = lineno
    rs.rule_count = rule_count
    if any(":" in l for l in rs.header_comments if "ip6tables" in l):
        rs.family = 6
    return rs

"""Parsers for the node's small text files: sysctl, /proc/modules, uname, kube-proxy metrics,
config and log, conntrack statistics. Pure functions; errors name the source and line."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ..errors import InputError


@dataclass(frozen=True)
class Value:
    """A value with where it was read (for evidence)."""

    value: str
    source: str
    line: int | None
    text: str


def parse_sysctl(text: str, source: str = "sysctl -a") -> dict[str, Value]:
    """``sysctl -a`` output (``key = value``); unreadable lines are an error naming the line."""
    out: dict[str, Value] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith(("#", "sysctl: ")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, sep, value = line.partition(":")  # "key: value" (busybox)
        key = key.strip()
        if not sep or not key or " " in key:
            raise InputError(source, f"not a 'key = value' line: {line[:120]}", lineno)
        out[key] = Value(value.strip(), source, lineno, line)
    return out


@dataclass(frozen=True)
class Module:
    name: str
    size: int
    refcount: int
    used_by: tuple[str, ...]
    state: str
    line: int


def parse_modules(text: str, source: str = "/proc/modules") -> dict[str, Module]:
    """``/proc/modules``: ``name size refcount used_by state address``."""
    out: dict[str, Module] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) < 3 or not (parts[1].isascii() and parts[1].isdigit()):
            raise InputError(source, f"not a /proc/modules line: {line[:120]}", lineno)
        used = tuple(u for u in (parts[3].split(",") if len(parts) > 3 else []) if u and u != "-")
        try:
            refcount = int(parts[2])
        except ValueError:
            refcount = 0
        out[parts[0]] = Module(parts[0], int(parts[1]), refcount, used, parts[4] if len(parts) > 4 else "Live", lineno)
    return out


def parse_kernel_version(text: str, source: str = "uname -r") -> tuple[int, int, int]:
    m = re.match(r"\s*(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        raise InputError(source, f"not a kernel release: {text.strip()[:80]!r}", 1)
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def parse_processes(text: str, source: str = "processes") -> dict[str, str]:
    """node/processes.txt: ``pid comm`` per line (the processes kpdiag looks for, and pid 1) → {comm: pid}, the first
    pid of each name. Lines that are not ``pid name`` are ignored (the file is written by kpdiag's collector)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and parts[0].isdigit():
            out.setdefault(parts[1].strip(), parts[0])
    return out


@dataclass(frozen=True)
class Cmdline:
    """A process's arguments (argv[0] first), each with its line in the file (one argument a line)."""

    args: tuple[tuple[int, str], ...]
    source: str


def parse_cmdline(text: str, source: str = "cmdline") -> Cmdline:
    """node/kube-proxy/cmdline.txt: one argument a line, as written from /proc/PID/cmdline (a NUL-separated copy is
    read the same way, its arguments all on line 1). Empty lines are not arguments."""
    args = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for arg in line.split("\0"):
            if arg.strip():
                args.append((lineno, arg.strip()))
    return Cmdline(tuple(args), source)


@dataclass
class Metrics:
    """Prometheus text exposition: name → list of (labels, value, line)."""

    samples: dict[str, list[tuple[dict[str, str], float, int]]] = field(default_factory=dict)
    source: str = "metrics"
    rejected: list[InputError] = field(default_factory=list)  # samples left out (a value that is not a finite number)

    def get(self, name: str, **labels) -> float | None:
        for lab, value, _ in self.samples.get(name, []):
            if all(lab.get(k) == v for k, v in labels.items()):
                return value
        return None

    def line_of(self, name: str) -> int | None:
        items = self.samples.get(name)
        return items[0][2] if items else None

    def histogram_mean(self, name: str) -> float | None:
        total = self.get(f"{name}_sum")
        count = self.get(f"{name}_count")
        if total is None or not count:
            return None
        return total / count

    def histogram_quantile(self, name: str, q: float) -> float | None:
        buckets = sorted(
            (
                (float("inf") if lab.get("le") in ("+Inf", "Inf") else float(lab["le"]), v)
                for lab, v, _ in self.samples.get(f"{name}_bucket", [])
                if "le" in lab
            ),
        )
        if not buckets or buckets[-1][1] <= 0:
            return None
        target = q * buckets[-1][1]
        for le, count in buckets:
            if count >= target:
                return le
        return None


_SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?$")
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str, source: str = "metrics") -> Metrics:
    # Hand-written, not prometheus_client.parser: that parser keeps no line numbers (evidence cites the sample's line,
    # Metrics.line_of; an error names file:line), takes NaN/±Inf as values without a word, and would be a runtime
    # dependency for these 20 lines. The text it reads was read bounded by the collector (node/kube-proxy/metrics.txt).
    m = Metrics(source=source)
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _SAMPLE_RE.match(line.strip())
        if not match:
            raise InputError(source, f"not a Prometheus sample: {line[:120]}", lineno)
        name, _, labels, value, _ = match.groups()
        try:
            v = float(value)
        except ValueError:
            raise InputError(source, f"sample value {value!r} is not a number", lineno) from None
        if not math.isfinite(v):  # NaN, +Inf, -Inf: no count, sum or timestamp kpdiag reads can be one
            m.rejected.append(
                InputError(source, f"{name}: sample value {value!r} is not a finite number: left out", lineno)
            )
            continue
        m.samples.setdefault(name, []).append((dict(_LABEL_RE.findall(labels or "")), v, lineno))
    return m


_KEY_LINE = re.compile(r"""(["']?)([^"':#{}\[\],\s][^"':#{}\[\],]*)\1\s*:(\s|$)""")


@dataclass
class KubeProxyConfig:
    data: dict
    source: str
    text: str

    def get(self, path: str, default=None):
        cur = self.data
        for part in path.split("."):
            if not isinstance(cur, dict) or part not in cur:
                return default
            cur = cur[part]
        return cur

    def line_of(self, key: str) -> int | None:
        """The line that sets ``key`` (a dotted path: ``ipvs.syncPeriod``), found by the keys' nesting (block YAML or
        indented JSON) — not the first line naming its last part, which may be ``iptables.syncPeriod``. Flow-style
        or one-line documents: the first line naming the last part."""
        parts = key.split(".")
        lines = self.text.splitlines()
        stack: list[tuple[int, str]] = []
        for lineno, line in enumerate(lines, 1):
            stripped = line.lstrip()
            m = _KEY_LINE.match(stripped)
            if not m:
                continue
            indent = len(line) - len(stripped)
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, m.group(2).strip()))
            if [k for _, k in stack] == parts:
                return lineno
        if any(_KEY_LINE.match(line.lstrip()) for line in lines):
            return None  # a document with one key per line that does not set it
        last = re.compile(rf"""(^|[\s{{,])["']?{re.escape(parts[-1])}["']?\s*:""")
        for lineno, line in enumerate(lines, 1):
            if last.search(line):
                return lineno
        return None

    @property
    def mode(self) -> str:
        """The configured mode; kube-proxy's default for an empty mode on Linux is iptables."""
        mode = self.get("mode")
        return (mode.strip() if isinstance(mode, str) else "") or "iptables"

    @property
    def mode_explicit(self) -> bool:
        """A mode is set (a non-string mode — `mode: 123` — is not one kube-proxy would accept: the default is
        what it runs with then, and the configuration is not the place kpdiag knows it from)."""
        mode = self.get("mode")
        return isinstance(mode, str) and bool(mode.strip())


def parse_kube_proxy_config(text: str, source: str = "config.yaml") -> KubeProxyConfig:
    """A KubeProxyConfiguration (YAML or JSON)."""
    try:
        import yaml
    except ImportError:  # pragma: no cover - yaml comes with the kubernetes client
        yaml = None  # type: ignore[assignment]  # no YAML parser: the text is read as JSON below
    if yaml is not None:
        from .decode import TooDeep, load_yaml

        try:
            data = load_yaml(text)  # nested 5,000 deep, or a billion laughs: refused, not a RecursionError
        except TooDeep as exc:
            raise InputError(source, f"YAML {exc}") from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            raise InputError(
                source, f"invalid YAML: {getattr(exc, 'problem', exc)}", (mark.line + 1) if mark else None
            ) from None
    else:
        data = {}
        for line in text.splitlines():
            m = re.match(r"(\w+):\s*\"?([^\"#]*)\"?", line)
            if m:
                data[m.group(1)] = m.group(2).strip()
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(source, "not a KubeProxyConfiguration (expected a mapping)", 1)
    kind = data.get("kind")
    if kind and kind != "KubeProxyConfiguration":
        raise InputError(source, f"kind is {kind!r}, not KubeProxyConfiguration", 1)
    return KubeProxyConfig(data, source, text)


def parse_conntrack_stats(text: str, source: str = "conntrack -S") -> dict[str, int]:
    """``conntrack -S`` (per-CPU lines ``cpu=0 found=0 invalid=3 … drop=0 insert_failed=0 …``), summed."""
    totals: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        pairs = re.findall(r"(\w+)=(\d+)", line)
        if not pairs:
            raise InputError(source, f"not a 'conntrack -S' line: {line[:120]}", lineno)
        for k, v in pairs:
            if k == "cpu":
                continue
            totals[k] = totals.get(k, 0) + int(v)
    return totals


# ---------------------------------------------------------------------------------------------- policy routing
RULE_ACTIONS = ("lookup", "blackhole", "unreachable", "prohibit", "goto", "nop")
_TABLE_NAMES = {"255": "local", "254": "main", "253": "default"}
_KNOWN_RULE_KEYS = {
    "priority",
    "family",
    "src",
    "srclen",
    "dst",
    "dstlen",
    "iif",
    "oif",
    "fwmark",
    "fwmask",
    "not",
    "table",
    "action",
    "ipproto",
    "sport",
    "dport",
    "sport_start",
    "sport_end",
    "dport_start",
    "dport_end",
    "iif_detached",
    "oif_detached",
    "protocol",
    "flags",
    "uid_start",
    "uid_end",
    "suppress_prefixlen",
}


@dataclass(frozen=True)
class IpRule:
    """One policy-routing rule (``ip rule``): its selectors, and the table it looks up or the action it takes."""

    family: int  # 4 or 6
    priority: int
    src: str | None  # a prefix ("10.1.0.0/16"); None: from all
    dst: str | None
    iif: str | None
    oif: str | None
    fwmark: int | None
    fwmask: int
    invert: bool  # "not": the selectors must NOT match
    action: str  # lookup | blackhole | unreachable | prohibit | goto | nop
    table: str | None  # for lookup: "main", "local", "default" or a number
    ipproto: str | None
    dport: tuple[int, int] | None
    sport: tuple[int, int] | None
    unknown: tuple[str, ...]  # selectors kpdiag does not evaluate (uidrange, tos, l3mdev, …): may or may not match
    line: int  # 1-based position in the list, for evidence
    suppress_prefixlen: int | None = (
        None  # a looked-up route this specific or less is ignored (wg-quick's "suppress_prefixlength 0")
    )

    @property
    def default(self) -> bool:
        """One of the kernel's own rules (0: local, 32766: main, 32767: default), which kpdiag's plain lookup follows."""
        plain = (
            self.src is None
            and self.dst is None
            and self.iif is None
            and self.oif is None
            and self.fwmark is None
            and not self.invert
            and self.ipproto is None
            and self.dport is None
            and self.sport is None
            and not self.unknown
            and self.suppress_prefixlen is None
        )
        return (
            plain
            and self.action == "lookup"
            and (self.priority, self.table) in ((0, "local"), (32766, "main"), (32767, "default"))
        )

    def text(self) -> str:
        """As ``ip rule`` prints it."""
        bits = [f"{self.priority}:"] + (["not"] if self.invert else [])
        bits += ["from", self.src or "all"]
        if self.dst:
            bits += ["to", self.dst]
        if self.fwmark is not None:
            bits += ["fwmark", f"0x{self.fwmark:x}" + (f"/0x{self.fwmask:x}" if self.fwmask != 0xFFFFFFFF else "")]
        for key in ("iif", "oif", "ipproto"):
            if getattr(self, key):
                bits += [key, str(getattr(self, key))]
        for key in ("sport", "dport"):
            rng = getattr(self, key)
            if rng:
                bits += [key, str(rng[0]) if rng[0] == rng[1] else f"{rng[0]}-{rng[1]}"]
        bits += list(self.unknown)
        bits += ["lookup", self.table or "?"] if self.action == "lookup" else [self.action]
        if self.suppress_prefixlen is not None:
            bits += ["suppress_prefixlength", str(self.suppress_prefixlen)]
        return " ".join(bits)


def _port_range(item: dict, key: str) -> tuple[int, int] | None:
    """``"dport": 53`` or ``"dport_start"``/``"dport_end"`` (ip -j rule), as (low, high)."""
    if item.get(key) is not None:
        lo, _, hi = str(item[key]).partition("-")
        return int(lo), int(hi or lo)
    if item.get(key + "_start") is not None:
        return int(item[key + "_start"]), int(item.get(key + "_end", item[key + "_start"]))
    return None


def _rule_prefix(item: dict, key: str, family: int) -> str | None:
    """The rule's from/to prefix as the kernel keeps it: the network address (a redacted bundle's mapped address may
    carry host bits), or None for "all"."""
    import ipaddress

    value = item.get(key)
    if value in (None, "all"):
        return None
    length = int(item.get(key + "len", 128 if family == 6 else 32))
    return str(ipaddress.ip_network(f"{value}/{length}", strict=False))


def parse_ip_rules(text: str, source: str = "ip -j rule") -> list[IpRule]:
    """``ip -j rule show`` of both families (each entry with ``"family": "inet"|"inet6"``, as kpdiag collects it;
    an entry without a family is IPv6 when its addresses are). An entry that cannot be read is an error naming it."""
    from .decode import load_json

    try:
        data = load_json(text)
    except ValueError as exc:
        raise InputError(source, f"not JSON: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, list):
        raise InputError(source, "expected a JSON list of rules (ip -j rule)")
    out: list[IpRule] = []
    for n, item in enumerate(data, 1):
        try:
            if not isinstance(item, dict):
                raise ValueError("not a JSON object")
            fam = item.get("family")
            addrs = [str(item.get(k) or "") for k in ("src", "dst")]
            family = 6 if fam == "inet6" or (fam is None and any(":" in a for a in addrs)) else 4
            if fam not in (None, "inet", "inet6"):
                raise ValueError(f"unknown family {fam!r}")

            action = str(item.get("action") or ("lookup" if "table" in item else "unknown"))
            if action == "to_tbl":
                action = "lookup"
            if action not in RULE_ACTIONS:
                raise ValueError(f"unknown action {action!r}")
            table = item.get("table")
            mark = item.get("fwmark")
            unknown = tuple(sorted(k for k in item if k not in _KNOWN_RULE_KEYS))
            if "uid_start" in item:
                unknown = tuple(
                    sorted((*unknown, f"uidrange {item['uid_start']}-{item.get('uid_end', item['uid_start'])}"))
                )
            out.append(
                IpRule(
                    family=family,
                    priority=int(item.get("priority", 0)),
                    src=_rule_prefix(item, "src", family),
                    dst=_rule_prefix(item, "dst", family),
                    iif=str(item["iif"]) if item.get("iif") else None,
                    oif=str(item["oif"]) if item.get("oif") else None,
                    fwmark=int(str(mark), 0) if mark is not None else None,
                    fwmask=int(str(item.get("fwmask", "0xffffffff")), 0),
                    invert="not" in item,
                    action=action,
                    table=_TABLE_NAMES.get(str(table), str(table)) if table is not None else None,
                    ipproto=str(item["ipproto"]) if item.get("ipproto") is not None else None,
                    dport=_port_range(item, "dport"),
                    sport=_port_range(item, "sport"),
                    unknown=unknown,
                    line=n,
                    suppress_prefixlen=int(item["suppress_prefixlen"])
                    if item.get("suppress_prefixlen") is not None
                    else None,
                )
            )
        except (ValueError, TypeError) as exc:
            raise InputError(source, f"rule {n}: {exc}", n) from None
    out.sort(key=lambda r: (r.family, r.priority, r.line))
    return out

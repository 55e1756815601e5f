"""Parsers for the node's small text files: sysctl, /proc/modules, uname, kube-proxy metrics,
config and log, conntrack statistics. Pure functions; errors name the source and line."""

from __future__ import annotations

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


@dataclass
class Metrics:
    """Prometheus text exposition: name → list of (labels, value, line)."""

    samples: dict[str, list[tuple[dict[str, str], float, int]]] = field(default_factory=dict)
    source: str = "metrics"

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
            ((float("inf") if lab.get("le") in ("+Inf", "Inf") else float(lab["le"]), v) for lab, v, _ in self.samples.get(f"{name}_bucket", []) if "le" in lab),
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
        return (self.get("mode") or "").strip() or "iptables"

    @property
    def mode_explicit(self) -> bool:
        return bool((self.get("mode") or "").strip())


def parse_kube_proxy_config(text: str, source: str = "config.yaml") -> KubeProxyConfig:
    """A KubeProxyConfiguration (YAML or JSON)."""
    try:
        import yaml
    except ImportError:  # pragma: no cover - yaml comes with the kubernetes client
        yaml = None
    if yaml is not None:
        from ..safeio import TooDeep, load_yaml

        try:
            data = load_yaml(text)  # nested 5,000 deep, or a billion laughs: refused, not a RecursionError
        except TooDeep as exc:
            raise InputError(source, f"YAML {exc}") from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            raise InputError(source, f"invalid YAML: {getattr(exc, 'problem', exc)}", (mark.line + 1) if mark else None) from None
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

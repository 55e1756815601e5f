"""kube-proxy's effective configuration: the configuration file (or the ConfigMap), the flags and the log, as one view.

kube-proxy builds its configuration this way (cmd/kube-proxy/app, its Options):

- with ``--config FILE`` the file is the configuration, and every flag of the configuration is ignored except
  ``--hostname-override`` (which wins over the file's hostnameOverride, trimmed and lower-cased) and the logging
  flags — kube-proxy's own help says "This parameter is ignored if a config file is specified by --config";
- without ``--config`` the flags are the configuration (the ConfigMap, if there is one, is not read by that process);
- a setting neither gives has kube-proxy's default (``mode`` empty is iptables on Linux, ``detectLocalMode`` empty is
  ClusterCIDR, ``metricsBindAddress`` 127.0.0.1:10249, ``healthzBindAddress`` 0.0.0.0:10256);
- ``masqueradeAll`` is ``nftables.masqueradeAll`` in nftables mode and ``iptables.masqueradeAll`` otherwise (the
  v1alpha1 conversion), the flag ``--masquerade-all``.

What kube-proxy decided at start-up, and why, is in its log: the proxier it uses, single- or dual-stack and the
family it could not use ("No iptables support for family", "No kernel support for family"), the node IPs it found
(or "assuming loopback"), a detect-local mode it could not apply. Each setting and each log fact keeps where it was
read (file, line, text), so a check cites it as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import re
import typing
from dataclasses import dataclass, field

from kpdiag.model import Evidence

if TYPE_CHECKING:
    from kpdiag.parse.node import Cmdline, KubeProxyConfig

# the fields checks read: name → (config path, flag, kind, kube-proxy's default). kind: str | bool | list
FIELDS: dict[str, tuple[str, str, str, object]] = {
    "mode": ("mode", "proxy-mode", "str", "iptables"),
    "clusterCIDR": ("clusterCIDR", "cluster-cidr", "list", ()),
    "nodePortAddresses": ("nodePortAddresses", "nodeport-addresses", "list", ()),
    "detectLocalMode": ("detectLocalMode", "detect-local-mode", "str", "ClusterCIDR"),
    "detectLocal.bridgeInterface": ("detectLocal.bridgeInterface", "pod-bridge-interface", "str", ""),
    "detectLocal.interfaceNamePrefix": ("detectLocal.interfaceNamePrefix", "pod-interface-name-prefix", "str", ""),
    "masqueradeAll": ("iptables.masqueradeAll", "masquerade-all", "bool", False),
    "hostnameOverride": ("hostnameOverride", "hostname-override", "str", ""),
    "bindAddress": ("bindAddress", "bind-address", "str", "0.0.0.0"),
    "metricsBindAddress": ("metricsBindAddress", "metrics-bind-address", "str", "127.0.0.1:10249"),
    "healthzBindAddress": ("healthzBindAddress", "healthz-bind-address", "str", "0.0.0.0:10256"),
}
# kube-proxy's boolean flags (given alone they mean true; any other flag takes the next argument without "=")
BOOL_FLAGS = frozenset(
    {
        "masquerade-all",
        "cleanup",
        "profiling",
        "bind-address-hard-fail",
        "init-only",
        "ipvs-strict-arp",
        "iptables-localhost-nodeports",
        "conntrack-tcp-be-liberal",
        "alsologtostderr",
        "logtostderr",
        "add-dir-header",
        "skip-headers",
        "skip-log-headers",
        "one-output",
        "version",
        "help",
    }
)
FLAGS_OVER_CONFIG = frozenset({"hostname-override"})  # the flags kube-proxy applies even with --config


@dataclass(frozen=True)
class Setting:
    """One field of the effective configuration and where it comes from: ``origin`` is "config" (the file or the
    ConfigMap), "flag" (the command line) or "default" (neither sets it; ``source`` then names what was read)."""

    name: str
    value: object  # str, bool, or a tuple of str (clusterCIDR, nodePortAddresses)
    origin: str
    source: str
    line: int | None = None
    text: str = ""

    @property
    def is_set(self) -> bool:
        return self.origin != "default"

    def evidence(self) -> Evidence:
        text = self.text or f"{self.name} is not set (kube-proxy's default: {self.value!r})"
        return Evidence(self.source, text, self.line)


@dataclass(frozen=True)
class LogFact:
    """What one line of kube-proxy's log states: ``kind`` (mode, stack, family-unsupported, node-ips,
    node-ip-loopback, detect-local-unset) and its values."""

    kind: str
    values: tuple[Any, ...]
    line: int
    text: str


@dataclass(frozen=True)
class Effective:
    """kube-proxy's effective configuration (``fields``: name → Setting, every name of FIELDS), the flags it ignores
    (``ignored``: given on the command line while --config is given), and what its log states (``log``)."""

    fields: typing.Mapping[str, Setting]
    ignored: tuple[Setting, ...]
    log: tuple[LogFact, ...]
    log_source: str
    from_flags_only: bool  # the command line has no --config: the flags are the whole configuration
    notes: tuple[str, ...] = field(default=())

    def __getitem__(self, name: str) -> Setting:
        return self.fields[name]

    def value(self, name: str) -> Any:
        return self.fields[name].value

    def facts(self, kind: str) -> list[LogFact]:
        return [f for f in self.log if f.kind == kind]

    def last(self, kind: str) -> LogFact | None:
        found = self.facts(kind)
        return found[-1] if found else None

    def log_evidence(self, fact: LogFact) -> Evidence:
        return Evidence(self.log_source, fact.text.strip()[:400], fact.line)


# ------------------------------------------------------------------ the command line


def parse_flags(args: typing.Sequence[tuple[int, str]]) -> dict[str, tuple[str, int, str]]:
    """kube-proxy's flags from its arguments ((line, text) pairs, argv[0] first): name → (value, line, text), the
    last occurrence winning as in pflag. ``--name=value``, ``--name value``, ``-name``; a boolean flag alone is
    "true"."""
    out: dict[str, tuple[str, int, str]] = {}
    items = list(args)[1:]
    i = 0
    while i < len(items):
        line, arg = items[i]
        i += 1
        if not arg.startswith("-") or arg in ("-", "--"):
            continue
        name, eq, value = arg.lstrip("-").partition("=")
        text = arg
        if not eq:
            if name in BOOL_FLAGS:
                value = "true"
            elif i < len(items):
                value, text = items[i][1], f"{arg} {items[i][1]}"
                i += 1
        out[name] = (value, line, text)
    return out


def _typed(kind: str, value: Any) -> Any:
    """A value as kube-proxy reads it (a flag's text, or the file's YAML value); None when it sets nothing."""
    if kind == "bool":
        if isinstance(value, bool):
            return value
        return str(value).strip().lower() in ("true", "1", "t") if value is not None else None
    if kind == "list":
        if isinstance(value, (list, tuple)):
            items = [str(v).strip() for v in value]
        elif isinstance(value, str):
            items = value.split(",")
        else:
            return None
        kept = tuple(v.strip() for v in items if v.strip())
        return kept or None
    if value is None:
        return None
    value = str(value).strip()
    return value or None


# ------------------------------------------------------------------ the configuration file


def _config_path(name: str, mode: str) -> str:
    path = FIELDS[name][0]
    if name == "masqueradeAll":
        from kpdiag import dataplane

        if dataplane.get(mode).services_in_nft:  # nftables mode reads its own section
            return "nftables.masqueradeAll"
    return path


def _from_config(config: KubeProxyConfig, name: str, mode: str) -> Setting | None:
    path = _config_path(name, mode)
    value = _typed(FIELDS[name][2], config.get(path))
    if value is None:
        return None
    line = config.line_of(path)
    text = config.text.splitlines()[line - 1].strip() if line else f"{path}: {value!r}"
    return Setting(name, value, "config", config.source, line, text)


def _from_flag(flags: dict[str, tuple[str, int, str]], name: str, source: str) -> Setting | None:
    flag = FIELDS[name][1]
    if flag not in flags:
        return None
    raw, line, text = flags[flag]
    value = _typed(FIELDS[name][2], raw)
    if value is None:
        return None
    if name == "hostnameOverride":
        value = value.lower()  # as kube-proxy applies the flag
    return Setting(name, value, "flag", source, line, text)


def effective(
    config: KubeProxyConfig | None,
    cmdline: Cmdline | None,
    log_lines: typing.Sequence[str] | None,
    log_source: str,
    default_source: str,
) -> Effective:
    """The effective configuration from the parsed configuration (kpdiag.parse.node.KubeProxyConfig or None), the
    command line (kpdiag.parse.node.Cmdline or None) and the log (lines or None)."""
    flags = parse_flags(cmdline.args) if cmdline is not None else {}
    flag_source = cmdline.source if cmdline is not None else ""
    # the file counts unless kube-proxy's own command line is known and gives no --config
    use_file = config is not None and (cmdline is None or "config" in flags)
    file_cfg = config if use_file else None  # the configuration kube-proxy reads, if any
    notes = []
    if config is not None and not use_file:
        notes.append(f"{config.source} is not kube-proxy's configuration: its command line has no --config")
    fields, ignored = {}, []
    mode_setting = (file_cfg is not None and _from_config(file_cfg, "mode", "")) or (
        not use_file and _from_flag(flags, "mode", flag_source)
    )
    mode = mode_setting.value if mode_setting else "iptables"
    for name, (_path, flag, _kind, default) in FIELDS.items():
        from_file = _from_config(file_cfg, name, str(mode)) if file_cfg is not None else None
        from_flag = _from_flag(flags, name, flag_source)
        if use_file and from_flag is not None and flag not in FLAGS_OVER_CONFIG:
            ignored.append(from_flag)
            from_flag = None
        chosen = from_flag or from_file
        if chosen is None:
            where = (file_cfg.source if file_cfg is not None else flag_source) or log_source or default_source
            chosen = Setting(name, default, "default", where)
        fields[name] = chosen
    return Effective(
        fields,
        tuple(ignored),
        tuple(log_facts(log_lines or ())),
        log_source,
        cmdline is not None and "config" not in flags,
        tuple(notes),
    )


# ------------------------------------------------------------------ the log

_FAMILY = r'"?(IPv[46])"?'
LOG_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("mode", re.compile(r"Using (iptables|ipvs|nftables|userspace|kernelspace) [Pp]rox(?:y|ier)")),
    (
        "family-unsupported",
        re.compile(rf'No (iptables|kernel) support for family"?.*?(?:ipFamily|family)={_FAMILY}'),
    ),
    (
        "family-unsupported",
        re.compile(rf"single-stack mode: (secondary) ipFamily is not supported.*?ipFamily={_FAMILY}"),
    ),
    ("stack", re.compile(rf"kube-proxy running in (single)-stack mode(?!:).*?ipFamily={_FAMILY}")),
    ("stack", re.compile(rf"kube-proxy running in (dual)-stack mode.*?(?:ipFamily={_FAMILY}|, (IPv[46])-primary)")),
    ("node-ip-loopback", re.compile(r"(Can't determine this node's IP), assuming loopback")),
    ("node-ips", re.compile(r'(?:Successfully retrieved (?:NodeIPs|node IP\(s\))"?.*?(?:NodeIPs|IPs)=\[([^\]]*)\])')),
    ("node-ips", re.compile(r'"?Detected node IP"? address="?([0-9a-fA-F:.]+)')),
    ("detect-local-unset", re.compile(r"[Dd]etect-local-mode set to (\w+), but ([^\"\n]*)")),
)


def log_facts(lines: typing.Iterable[str]) -> typing.Iterator[LogFact]:
    """The facts of kube-proxy's log, line by line (a line states at most one)."""
    for n, line in enumerate(lines, 1):
        if len(line) > 4000:
            continue
        for kind, pattern in LOG_PATTERNS:
            m = pattern.search(line)
            if m:
                values = tuple(v for v in m.groups() if v is not None)
                yield LogFact(kind, values, n, line)
                break

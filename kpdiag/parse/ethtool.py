"""``ethtool -k DEV`` (the offload features), one block per device as the collector concatenates them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kpdiag.errors import InputError

_HEADER = re.compile(r"^Features for (\S+?):\s*$")
_FEATURE = re.compile(r"^\s*([a-z0-9][a-z0-9_-]*): (on|off)(?: \[(fixed|requested on|requested off)\])?\s*$")
MAX_DEVICES = 64


@dataclass
class Feature:
    name: str
    on: bool
    fixed: bool
    line: int
    text: str


@dataclass
class Offloads:
    """device → feature name → Feature (with the line it was read from, for evidence)."""

    source: str
    devices: dict[str, dict[str, Feature]] = field(default_factory=dict)

    def feature(self, device: str, name: str) -> Feature | None:
        return self.devices.get(device, {}).get(name)


def parse_ethtool_features(text: str, source: str = "ethtool -k") -> Offloads:
    """Blocks of ``Features for DEV:`` followed by ``name: on|off [fixed]`` lines. A feature line before any header,
    or a line that is neither, is an error naming its line (the file is what ethtool printed, nothing else)."""
    out = Offloads(source)
    current: dict[str, Feature] | None = None
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        m = _HEADER.match(raw)
        if m:
            if len(out.devices) >= MAX_DEVICES:
                raise InputError(source, f"more than {MAX_DEVICES} devices", n)
            current = out.devices.setdefault(m.group(1), {})
            continue
        f = _FEATURE.match(raw)
        if f is None or current is None:
            raise InputError(source, f"not a line of ethtool -k: {raw.strip()[:80]!r}", n)
        current[f.group(1)] = Feature(f.group(1), f.group(2) == "on", f.group(3) == "fixed", n, raw.strip())
    return out

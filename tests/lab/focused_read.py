"""Run inside a lab namespace: kpdiag's focused read of one Service's rules and the whole dump, as JSON on stdout.

    ip netns exec NS python -m tests.lab.focused_read NS/NAME

{"focused": {path: text}, "partial": {...} | null, "errors": [...], "full": {path: text}} — the focused read through
the collector (kpdiag/collect/service_rules.py, the same bounds as a live run), the whole dump through the collector's own
iptables step, both from this namespace's kernel."""

from __future__ import annotations

import json
import sys

from kpdiag.collect.service_rules import READERS, NotFocused
from kpdiag.collect.node import NodeCollector


def main(service: str) -> int:
    focused = NodeCollector(host_root="/")
    reader = READERS["iptables"](focused, service)
    try:
        reader.collect()
        fallback = None
    except NotFocused as exc:
        fallback = str(exc)
    full = NodeCollector(host_root="/")
    full.iptables()
    out = {
        "focused": {k: v.decode() for k, v in focused.out.files.items() if "iptables" in k},
        "partial": reader.partial or None,
        "fallback": fallback,
        "errors": focused.out.errors,
        "full": {k: v.decode() for k, v in full.out.files.items() if "iptables" in k},
    }
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

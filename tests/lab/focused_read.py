"""Run inside a lab namespace: kpdiag's focused read of one Service's rules and the whole dump, as JSON on stdout.

    ip netns exec NS python -m tests.lab.focused_read NS/NAME [MODE]

{"focused": {path: text}, "partial": {...} | null, "errors": [...], "full": {path: text}} — the focused read through
the collector (kpdiag/collect/service_rules.py, the same bounds as a live run), the whole dump through the collector's own
iptables step, both from this namespace's kernel (with the nftables tables
that are not iptables-nft's own, read by both)."""

from __future__ import annotations

import json
import sys

from kpdiag.collect.service_rules import NotFocused, reader as rules_reader
from kpdiag.collect.node import NodeCollector


def main(service: str, mode: str = "iptables") -> int:
    focused = NodeCollector(host_root="/")
    reader = rules_reader(mode, focused, service)
    try:
        reader.collect()
        fallback = None
    except NotFocused as exc:
        fallback = str(exc)
    full = NodeCollector(host_root="/")
    full.iptables()
    full.nft()  # a host firewall's own nftables tables (inet, ip6 …): the focused read lists them too
    out = {
        "focused": {k: v.decode() for k, v in focused.out.files.items() if "tables-save" in k or "nft-ruleset" in k},
        "partial": reader.partial or None,
        "reader": type(reader).__name__,
        "fallback": fallback,
        "errors": focused.out.errors,
        "full": {k: v.decode() for k, v in full.out.files.items() if "tables-save" in k or "nft-ruleset" in k},
    }
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))

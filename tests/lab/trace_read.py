"""Run inside a lab namespace: a live ``kpdiag trace`` of each packet given, through the focused read of its
destination (kpdiag/collect/dest_rules.py) and through the whole dump, as JSON on stdout.

    ip netns exec NS python -m tests.lab.trace_read '[{"src": …, "dst": …, "proto": …, "dport": …, "origin": …}, …]'

[{"packet": {...}, "focused": trace JSON, "read": what the focused read holds | null, "problems": [...],
  "full": trace JSON}, …] — the whole dump is read once, each packet's focused read on its own, both from this
namespace's kernel through the collector a live trace uses (kpdiag/commands/trace.py setup_trace)."""

from __future__ import annotations

import json
import sys

from kpdiag.collect.dest_rules import Destination
from kpdiag.render.trace import trace_to_json
from kpdiag.commands.trace import explain_unmatched, setup_trace
from kpdiag.trace.model import Packet


def _trace(setup, packet: Packet) -> dict:
    return json.loads(trace_to_json(explain_unmatched(setup.tracer.trace(packet), setup)))


def main(spec: str) -> int:
    packets = [Packet(**p) for p in json.loads(spec)]
    whole = {}
    out = []
    for packet in packets:
        family = 6 if ":" in packet.dst else 4
        if family not in whole:
            whole[family] = setup_trace(live=True, host_root="/", family=family)
        focused = setup_trace(
            live=True, host_root="/", family=family, dest=Destination(packet.dst, packet.dport, packet.proto)
        )
        out.append(
            {
                "packet": {k: getattr(packet, k) for k in ("src", "dst", "proto", "dport", "origin")},
                "focused": _trace(focused, packet),
                "read": focused.read,
                "problems": [str(p) for p in focused.problems],
                "full": _trace(whole[family], packet),
            }
        )
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

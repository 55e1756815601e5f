"""nftables `iif`/`oif` (interface index matches, printed by name) and values kpdiag cannot read: never a crash.

tests/trace/data/nft-iif-lo.json is `nft -j list ruleset` of a real kernel after loading:
  table inet filter {
    chain input { type filter hook input priority 0; policy drop; iif "lo" accept; tcp dport 22 accept; }
    chain output { type filter hook output priority 0; policy accept; oif "lo" accept; }
  }
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from kpdiag import exitcodes

RULESET = os.path.join(os.path.dirname(__file__), "data", "nft-iif-lo.json")


def _trace(*args):
    proc = subprocess.run(
        [sys.executable, "-m", "kpdiag", "trace", "--nft", RULESET, "-o", "json", *args], capture_output=True, text=True
    )
    assert "internal error" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_iif_lo_accepts_what_the_node_sends_itself_and_not_what_arrives_on_eth0():
    rc, doc = _trace("--src", "192.168.1.2", "--dst", "192.168.1.1:80", "--local-ip", "192.168.1.1", "--iif", "eth0")
    assert rc == exitcodes.TRACE_DROPPED and [p["verdict"] for p in doc["paths"]] == ["drop"]
    rc, doc = _trace("--src", "192.168.1.2", "--dst", "192.168.1.1:22", "--local-ip", "192.168.1.1", "--iif", "eth0")
    assert rc == exitcodes.TRACE_DELIVERED
    rc, doc = _trace("--from", "node", "--src", "127.0.0.1", "--dst", "127.0.0.1:80", "--local-ip", "127.0.0.1")
    assert rc == exitcodes.TRACE_DELIVERED and [p["delivery"] for p in doc["paths"]] == ["local"]
    texts = [s["text"] for s in doc["paths"][0]["steps"]]
    assert any("oif lo" in t for t in texts) and any("iif lo" in t for t in texts)


def test_a_value_kpdiag_cannot_read_makes_the_path_uncertain(tmp_path):
    doc = json.load(open(RULESET))
    for item in doc["nftables"]:
        rule = item.get("rule")
        if rule and rule["chain"] == "input":
            for e in rule["expr"]:
                if "match" in e and e["match"]["left"].get("payload", {}).get("field") == "dport":
                    e["match"]["right"] = "not-a-port"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kpdiag",
            "trace",
            "--nft",
            str(bad),
            "-o",
            "json",
            "--src",
            "192.168.1.2",
            "--dst",
            "192.168.1.1:22",
            "--local-ip",
            "192.168.1.1",
            "--iif",
            "eth0",
        ],
        capture_output=True,
        text=True,
    )
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    out = json.loads(proc.stdout)
    assert out["uncertain"] and any("not-a-port" in n for p in out["paths"] for n in p["notes"]), out


def test_a_mangle_whose_selector_is_not_an_object_makes_the_path_uncertain():
    """`{"mangle": {"key": {"meta": null}}}` (found by mypy: `(meta or ct).get` on None) is a value kpdiag cannot
    read: the path is uncertain with a note, the trace goes on (it raised AttributeError)."""
    from kpdiag.parse.nft import parse_nft_json
    from kpdiag.trace.model import Packet
    from kpdiag.trace.nftables import NftTracer
    from kpdiag.trace.routing import RoutingTable

    doc = json.load(open(RULESET))
    for item in doc["nftables"]:
        rule = item.get("rule")
        if rule and rule["chain"] == "input":
            rule["expr"].insert(0, {"mangle": {"key": {"meta": None}, "value": 1}})
    routing = RoutingTable.from_local_ips(["192.168.1.1"])
    result = NftTracer(parse_nft_json(json.dumps(doc)), routing).trace(
        Packet("192.168.1.2", "192.168.1.1", "tcp", 22, iif="eth0")
    )
    notes = [n for p in result.paths for n in p.notes]
    assert any("mangle of something other than the mark" in n for n in notes), notes

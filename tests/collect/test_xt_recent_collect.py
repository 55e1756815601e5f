"""The node collector's xt_recent step (kpdiag/collect/node.py ``xt_recent``) over a /proc of files: kube-proxy's
tables with the clock to date them; a table it cannot read keeps nothing (part of the state would send a recorded
client elsewhere) and says why; no xt_recent folder: nothing, no error."""

from __future__ import annotations

import json

from kpdiag.bundle import sources
from kpdiag.collect.node import NodeCollector
from kpdiag.parse.recent import parse_xt_recent

ENTRY = "src=192.168.50.2 ttl: 64 last_seen: 4295163628 oldest_pkt: 2 4295163562, 4295163628\n"
CLOCK = (
    "Timer List Version: v0.10\nHRTIMER_MAX_CLOCK_BASES: 8\nnow at 1087864759768 nsecs\n\ncpu: 0\njiffies: 4295164177\n"
)


def _proc(tmp_path, tables: dict) -> str:
    folder = tmp_path / "proc" / "net" / "xt_recent"
    folder.mkdir(parents=True)
    for name, text in tables.items():
        if text is None:
            (folder / name).mkdir()  # not readable as a file
        else:
            (folder / name).write_text(text)
    (tmp_path / "proc" / "timer_list").write_text(CLOCK)
    return str(tmp_path / "proc")


def _collect(proc: str) -> NodeCollector:
    c = NodeCollector(host_root="/", proc=proc, only=[sources.XT_RECENT])
    c.xt_recent()
    return c


def test_kube_proxys_tables_are_kept_with_the_clock(tmp_path):
    c = _collect(_proc(tmp_path, {"KUBE-SEP-AAA": ENTRY, "KUBE-SEP-BBB": "", "ssh-guard": ENTRY}))
    doc = json.loads(c.out.files[sources.XT_RECENT])
    assert sorted(doc["tables"]) == ["KUBE-SEP-AAA", "KUBE-SEP-BBB"]  # kube-proxy's only
    assert doc["jiffies"] == 4295164177 and abs(doc["uptime"] - 1087.864759768) < 1e-9
    state = parse_xt_recent(c.out.files[sources.XT_RECENT].decode(), sources.XT_RECENT)
    assert state.hz == 250 and state.tables["KUBE-SEP-AAA"] == {"192.168.50.2": 4295163628}
    assert not c.out.errors


def test_a_table_that_cannot_be_read_keeps_nothing_and_says_why(tmp_path):
    c = _collect(_proc(tmp_path, {"KUBE-SEP-AAA": ENTRY, "KUBE-SEP-BBB": None}))
    assert sources.XT_RECENT not in c.out.files
    assert [e["source"] for e in c.out.errors] == [sources.XT_RECENT]
    assert "KUBE-SEP-BBB: not readable" in c.out.errors[0]["error"]


def test_no_xt_recent_folder_is_no_state_and_no_error(tmp_path):
    (tmp_path / "proc").mkdir()
    c = _collect(str(tmp_path / "proc"))
    assert sources.XT_RECENT not in c.out.files and not c.out.errors

"""Session affinity with recorded state (kpdiag/parse/recent.py, kpdiag/trace/affinity.py), from the
session-affinity-recorded fixture (recorded on the real kernel: the client 192.168.50.2 in pod1's recent table) and
edits of it: an expired entry, an entry without a clock, no state at all, a file that is not the kernel's."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from kpdiag.errors import InputError
from kpdiag.parse.recent import hz_from, parse_xt_recent
from kpdiag.commands.trace import setup_trace
from kpdiag.trace.model import Packet
from tests.conftest import FIXTURES

FIXTURE = os.path.join(FIXTURES, "session-affinity-recorded")
RECENT = "node/xt-recent.json"
PODS = {"10.244.1.10:8080", "10.244.1.11:8080", "10.244.1.12:8080"}


def _trace(bundle: str, src: str = "192.168.50.2"):
    setup = setup_trace(bundle=bundle)
    return setup.tracer.trace(Packet(src, "10.96.0.70", "tcp", 80)), setup


def _edited(tmp_path, edit) -> str:
    b = tmp_path / "b"
    shutil.copytree(FIXTURE, b)
    path = b / RECENT
    if edit is None:
        path.unlink()
    else:
        doc = json.loads(path.read_text())
        edit(doc)
        path.write_text(json.dumps(doc))
    return str(b)


def test_hz_from_jiffies_and_uptime():
    # this machine's kernel: CONFIG_HZ=250, read at 640.09 s after boot
    assert hz_from(4295052234, 640.09) == 250
    assert hz_from(2**32 + 1000 * 700, 1000.0) == 1000
    assert hz_from(2**32 + 100, 301.0) is None  # too soon after boot to tell
    assert hz_from(2**32 + 170 * 700, 1000.0) is None  # no common HZ


def test_the_recorded_client_takes_its_endpoint_and_is_told_until_when():
    result, _ = _trace(FIXTURE)
    assert [p.dnat for p in result.paths] == ["10.244.1.11:8080"]
    assert result.paths[0].probability == 1.0
    note = [n for n in result.paths[0].notes if "was recorded here" in n]
    assert note and "192.168.50.2" in note[0] and "(node/xt-recent.json)" in note[0]
    # the fixture was read at 00:10:00 (its "created"), the entry last seen 549 jiffies (HZ 250: 2 s) before
    assert "last seen 2026-12-03 00:09:57 UTC" in note[0]
    assert "until 2026-12-03 03:09:57 UTC (last seen + --seconds 10800)" in note[0]


def test_a_client_without_an_entry_gets_the_1_in_n_choice():
    result, _ = _trace(FIXTURE, src="192.168.50.9")
    assert {p.dnat for p in result.paths} == PODS
    assert all(abs(p.probability - 1 / 3) < 1e-6 for p in result.paths)
    assert any("192.168.50.9 has no entry in the node's recent tables" in n for n in result.paths[0].notes)


def test_without_state_the_note_and_1_in_n_as_before(tmp_path):
    result, _ = _trace(_edited(tmp_path, None))
    assert {p.dnat for p in result.paths} == PODS
    assert any("kpdiag assumes this client was not seen before" in n for n in result.paths[0].notes)


def test_an_entry_older_than_seconds_has_expired(tmp_path):
    def age(doc):
        doc["jiffies"] += 250 * 10801  # read 10801 s after the entry's last sighting (HZ 250)
        doc["uptime"] += 10801

    result, _ = _trace(_edited(tmp_path, age))
    assert {p.dnat for p in result.paths} == PODS
    assert any("past --seconds 10800: expired" in n for p in result.paths for n in p.notes)


def test_an_entry_whose_age_is_unknown_is_taken_but_uncertain(tmp_path):
    result, _ = _trace(_edited(tmp_path, lambda doc: doc.pop("jiffies")))
    assert [p.dnat for p in result.paths] == ["10.244.1.11:8080"]
    assert result.paths[0].uncertain
    assert any("when it was last seen is not known" in n for n in result.paths[0].notes)


@pytest.mark.parametrize(
    "text, says",
    [
        ("{", "invalid JSON"),
        ('{"tables": []}', 'not an object with "tables"'),
        ('{"tables": {"KUBE-SEP-X": "garbage\\n"}}', "line 1: not an xt_recent entry"),
        ('{"tables": {"KUBE-SEP-X": "src=nope ttl: 1 last_seen: 5 oldest_pkt: 1 5\\n"}}', "'nope' is not an address"),
    ],
)
def test_a_file_that_is_not_the_kernels_is_one_clear_error(text, says):
    with pytest.raises(InputError) as err:
        parse_xt_recent(text, RECENT)
    assert err.value.source == RECENT and says in str(err.value)


def test_an_unreadable_state_file_is_a_problem_and_the_trace_goes_on(tmp_path):
    b = tmp_path / "b"
    shutil.copytree(FIXTURE, b)
    (b / RECENT).write_text("{")
    result, setup = _trace(str(b))
    assert {p.dnat for p in result.paths} == PODS  # as without state
    assert any(p.source.startswith(RECENT) and "invalid JSON" in p.error for p in setup.problems), setup.problems

"""A manifest entry about a file the bundle holds is a note (how it was read, what was left out of it), not a failure:
only a file that is not there is "not collected"."""

from __future__ import annotations

import json

from kpdiag.bundle import sources
from kpdiag.bundle.store import Bundle


def _bundle(tmp_path, files: dict[str, str], errors: list[dict]) -> Bundle:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / "kpdiag.json").write_text(json.dumps({"format": "kpdiag-bundle/1", "node": "n1", "errors": errors}))
    return Bundle.open(str(tmp_path))


def test_a_note_about_a_file_that_is_there_is_not_a_failure(tmp_path):
    note = "iptables-nft's own tables (ip filter, ip nat) left out: node/iptables-save.txt has their rules"
    gone = "iptables-save failed: exit 4"
    b = _bundle(
        tmp_path,
        {sources.NFT_RULESET: '{"nftables": []}\n'},
        [{"source": sources.NFT_RULESET, "error": note}, {"source": sources.IPTABLES_SAVE, "error": gone}],
    )
    said = {p.source: p.error for p in b.problems}
    assert said[sources.NFT_RULESET] == f"collected, with a note: {note}"
    assert said[sources.IPTABLES_SAVE] == f"not collected: {gone}"


def test_a_key_twice_in_the_manifest_is_said(tmp_path):
    """JSON allows a key twice and the last one is read: a manifest with "node" twice says so (which was meant is not
    known), a key repeated inside an inner object is not the manifest's."""
    (tmp_path / "kpdiag.json").write_text(
        '{"format": "kpdiag-bundle/1", "node": "real", "timings": {"a": 1, "a": 2}, "node": "forged"}'
    )
    b = Bundle.open(str(tmp_path))
    assert b.manifest["node"] == "forged"
    said = [p.error for p in b.problems if p.source.endswith("kpdiag.json")]
    assert said == ["key 'node' appears twice: the last one is read"], said

"""Review (issue 25): a focused IPVS collection keeps of kube-ipvs0 only the addresses in focus (and of IPVS only the
Service's virtual servers). ``analyze`` of such a bundle must not judge the node on what it left out: a node-wide
finding of the whole bundle is either found again or its check is skipped saying it is a partial bundle — never
silently passed (silence means "checked, and fine").

The partial bundle is made with the collector's own code (kpdiag/collect/ipvs_rules.py: ``service_keys``,
``node_addresses``, ``IpvsFocused._narrow_bound``) over the fixture's files.

REVIEW: fails on main b596b61 — KP307 (strictARP off with LoadBalancer IPs bound on kube-ipvs0) fires on the whole
bundle and is silent on the bundle focused on another Service (shop/web).
"""

from __future__ import annotations

import json
import os

from kpdiag.bundle import sources
from kpdiag.bundle.store import write_bundle
from kpdiag.collect import ipvs_rules as R
from kpdiag.collect.node import NodeCollector
from kpdiag.commands.pipeline import analyze_bundle

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(ROOT, "fixtures", "ipvs-no-strict-arp")


def _files(d: str) -> dict[str, bytes]:
    out = {}
    for dirpath, _, names in os.walk(d):
        for n in names:
            rel = os.path.relpath(os.path.join(dirpath, n), d)
            if rel != "scenario.json":
                out[rel] = open(os.path.join(dirpath, n), "rb").read()
    return out


def _ipvs_only(text: str, keys: list[tuple[str, str, int]]) -> str:
    """ipvsadm -Sn lines of the virtual servers at ``keys`` (what the focused read's GET_SERVICE/GET_DEST give)."""
    flag = {"tcp": "-t", "udp": "-u", "sctp": "--sctp-service"}
    want = {f"{flag[p]} {a}:{port}" for p, a, port in keys}
    return "".join(line + "\n" for line in text.splitlines() if " ".join(line.split()[1:3]) in want)


def _focused_bundle(out: str, service: str) -> None:
    files = _files(FIXTURE)
    manifest = json.loads(files.pop("kpdiag.json"))
    ns, name = service.split("/")
    svc = next(
        s
        for s in json.loads(files[sources.SERVICES])["items"]
        if s["metadata"]["namespace"] == ns and s["metadata"]["name"] == name
    )
    # the API view of a focused run: that Service only
    files[sources.SERVICES] = json.dumps({"kind": "ServiceList", "apiVersion": "v1", "items": [svc]}).encode()
    keys = R.service_keys(svc, R.node_addresses(files[sources.IP_ADDR]))
    c = NodeCollector(host_root=None)
    c.out.files.update({k: v for k, v in files.items() if k in (sources.IP_ADDR, sources.IP_ROUTE)})
    reader = R.IpvsFocused(c, service)
    holds = reader._narrow_bound({a for _, a, _ in keys})
    assert reader.left_out, "nothing narrowed: the test shows nothing"
    files[sources.IP_ADDR] = c.out.files[sources.IP_ADDR]
    files[sources.IP_ROUTE] = c.out.files[sources.IP_ROUTE]
    for src in (sources.IPVSADM, sources.IPVSADM_LIST):
        files.pop(src, None)
    files[sources.IPVSADM] = _ipvs_only(open(os.path.join(FIXTURE, sources.IPVSADM)).read(), keys).encode()
    manifest["partial"] = {
        "service": service,
        "mode": "ipvs",
        "holds": {**holds, str(sources.IPVSADM): reader.what(len(keys), len(keys))},
        "chains": {},
        "virtual_servers": [R._key_text(*k) for k in keys],
        "left_out": reader.left_out,
    }
    write_bundle(files, out, manifest)


def test_a_focused_ipvs_bundle_does_not_pass_what_it_left_out(tmp_path):
    whole = analyze_bundle(FIXTURE)
    assert "KP307" in {f.id for f in whole.findings}
    out = str(tmp_path / "b")
    _focused_bundle(out, "shop/web")
    part = analyze_bundle(out)
    assert part.extra["partial"]["service"] == "shop/web"
    have = {f.id for f in part.findings}
    skipped = {c.id: c.reason or "" for c in part.checks if c.status == "skipped"}
    assert "KP307" in have or "partial bundle" in skipped.get("KP307", ""), (
        have,
        {c.id: c.status for c in part.checks if c.id == "KP307"},
    )

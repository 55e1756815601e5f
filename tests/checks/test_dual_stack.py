"""A dual-stack Service has an EndpointSlice per address family; kube-proxy programs each family's rules from its
own. Comparing a node's IPv4 rules with the API must use the IPv4 endpoints only (and FQDN slices never)."""

from __future__ import annotations

import copy
import json
import os
import shutil

from kpdiag.diagnose import analyze_bundle
from tests.conftest import FIXTURES


def _with_ipv6_slices(tmp_path, fixture: str) -> str:
    out = str(tmp_path / fixture)
    shutil.copytree(os.path.join(FIXTURES, fixture), out)
    path = os.path.join(out, "cluster", "endpointslices.json")
    doc = json.load(open(path))
    extra = []
    for item in doc["items"]:
        six = copy.deepcopy(item)
        six["metadata"]["name"] += "-v6"
        six["addressType"] = "IPv6"
        for i, ep in enumerate(six["endpoints"]):
            ep["addresses"] = [f"fd00:244:1::{i + 10:x}"]
        fqdn = copy.deepcopy(item)
        fqdn["metadata"]["name"] += "-fqdn"
        fqdn["addressType"] = "FQDN"
        for ep in fqdn["endpoints"]:
            ep["addresses"] = ["backend.example.com"]
        extra += [six, fqdn]
    doc["items"] += extra
    json.dump(doc, open(path, "w"))
    return out


def test_ipv6_and_fqdn_slices_do_not_make_ipv4_rules_stale(tmp_path):
    for fixture, checks in (("cluster-node-consistent", ("KP202", "KP203")), ("cluster-nft-consistent", ("KP402", "KP403")),
                            ("ipvs-healthy", ("KP302", "KP303"))):
        report = analyze_bundle(_with_ipv6_slices(tmp_path, fixture))
        fired = {f.id for f in report.findings}
        assert not fired.intersection(checks), (fixture, [f.summary for f in report.findings if f.id in checks])
        status = {c.id: c.status for c in report.checks}
        assert all(status[c] == "ran" for c in checks), (fixture, {c: status[c] for c in checks})  # compared, not skipped


def test_drift_is_still_found_with_ipv6_slices_present(tmp_path):
    report = analyze_bundle(_with_ipv6_slices(tmp_path, "cluster-node-drift"))
    assert {"KP202", "KP203"} <= {f.id for f in report.findings}

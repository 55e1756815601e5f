"""The ClusterIP series on the real kernel: as many connects as the endpoints need, each from its own source port,
each attributed to the endpoint it reached when conntrack here shows kube-proxy's DNAT (the node's network namespace)
and to none when it does not (a pod's: no NAT there) — never a guess."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.synth import Endpoint, Port, Service, iptables_ruleset

from .netlab import KubeNodeLab

pytestmark = pytest.mark.lab
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = """
import json
from kpdiag.collect.probes import ProbeBudget, connect_series
from kpdiag.collect.ct_lookup import ConntrackLookup
lookup = ConntrackLookup()
out, summary = connect_series(ProbeBudget({"10.96.0.20"}), "10.96.0.20", 80, 2, lookup=lookup)
print(json.dumps({"results": out, "summary": summary}))
"""


def _series(lab, role: str) -> dict:
    proc = lab.sh(role, ["env", f"PYTHONPATH={ROOT}", sys.executable, "-c", SCRIPT], timeout=60)
    return json.loads(proc.stdout)


def test_series_reaches_both_endpoints_and_says_which_only_where_conntrack_shows_it(lab):
    k = KubeNodeLab.build(lab, pod_count=3)
    pod1, pod2 = k.pods["pod1"], k.pods["pod2"]
    k.load_iptables(
        iptables_ruleset(
            [Service("shop", "web", "10.96.0.20", [Port("http", 80, 8080)], [Endpoint(pod1), Endpoint(pod2)])]
        )
    )
    lab.route("node", "default", "dev", "cni0")  # a node routes the Service CIDR somewhere (its default route)
    lab.background("pod1", [sys.executable, "-m", "http.server", "8080", "--bind", "0.0.0.0"], subprocess.DEVNULL)
    lab.sh(
        "pod2",
        ["iptables", "-A", "INPUT", "-p", "tcp", "--dport", "8080", "-j", "REJECT", "--reject-with", "tcp-reset"],
    )
    import time

    time.sleep(0.5)
    node = _series(lab, "node")  # the node's own connects: kube-proxy's OUTPUT DNAT, in this conntrack table
    s = node["summary"]
    assert s["wanted"] == 11 and s["sent"] == 11 and s["stopped"] is None and s["reached_known"], s
    sports = [r["detail"]["sport"] for r in node["results"]]
    assert len(set(sports)) == 11, sports
    by_endpoint = {}
    for r in node["results"]:
        by_endpoint.setdefault(r["detail"]["reached"], set()).add(r["result"])
    assert set(by_endpoint) <= {f"{pod1}:8080", f"{pod2}:8080"}, by_endpoint
    # the kernel decides each connect's fate by the endpoint it chose: web-1 answers, web-2 resets
    assert by_endpoint.get(f"{pod1}:8080", {"connected"}) == {"connected"}, by_endpoint
    assert by_endpoint.get(f"{pod2}:8080", {"refused"}) == {"refused"}, by_endpoint
    pod = _series(lab, "pod0")  # a pod: its conntrack saw no NAT, so which endpoint is not known — and not guessed
    assert all(r["detail"]["reached"] is None for r in pod["results"]), pod["results"]
    assert pod["summary"]["reached_known"] is False and pod["summary"]["why_unknown"], pod["summary"]
    assert {r["result"] for r in pod["results"]} <= {"connected", "refused"}

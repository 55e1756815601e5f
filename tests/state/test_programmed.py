"""What kube-proxy programmed, read back from its rules: internalTrafficPolicy: Local in iptables and nftables mode.

kube-proxy sends a Local Service's ClusterIP to KUBE-SVL (iptables) or a local-… chain (nftables) over this node's
endpoints only, and when there is none here it DROPs the port ("has no local endpoints" in the filter table; ``drop``
in no-endpoint-services). Those ports are programmed (not KP202/KP402), their endpoints are this node's (not KP203/
KP403 against every ready endpoint), and the fleet comparison must not call them drift (KP803).
"""

from __future__ import annotations

import os

from kpdiag.state import programmed
from kpdiag.bundle.store import Bundle
from kpdiag.state.kube_rules import programmed_ports
from kpdiag.parse.iptables import parse_iptables_save
from kpdiag.state.node import NodeState
from tests.synth import Endpoint, Port, Service, iptables_ruleset
from tests.conftest import FIXTURES

SERVICES = [
    Service(
        "shop",
        "web",
        "10.96.0.20",
        [Port("http", 80, 8080)],
        [Endpoint("10.244.1.10", local=True), Endpoint("10.244.2.10")],
    ),
    Service(
        "shop",
        "agent",
        "10.96.0.50",
        [Port("http", 80, 8080)],
        [Endpoint("10.244.1.13", local=True), Endpoint("10.244.2.7")],
        itp_local=True,
    ),
    Service("shop", "probe", "10.96.0.51", [Port("http", 80, 8080)], [Endpoint("10.244.2.8")], itp_local=True),
    Service(
        "shop",
        "both",
        "10.96.0.52",
        [Port("http", 80, 8080, node_port=30090)],
        [Endpoint("10.244.1.14", local=True), Endpoint("10.244.2.9")],
        itp_local=True,
        etp_local=True,
    ),
    Service("shop", "empty", "10.96.0.53", [Port("http", 80, 8080)], [], itp_local=True),
]


def test_iptables_local_policy_is_read_from_the_rules():
    ports = programmed_ports(parse_iptables_save(iptables_ruleset(SERVICES), "iptables-save"))
    web, agent, probe, both, empty = (ports[f"shop/{n}:http"] for n in ("web", "agent", "probe", "both", "empty"))
    assert not web.local_policy and web.chain.startswith("KUBE-SVC-") and len(web.endpoints) == 2
    assert agent.local_policy and agent.chain.startswith("KUBE-SVL-") and agent.endpoints == ["10.244.1.13:8080"]
    assert agent.cluster_cidr == "10.244.0.0/16"  # the masquerade rule is in KUBE-SVL, where kube-proxy writes it
    # no endpoint on this node: a DROP in the filter table, not a REJECT "has no endpoints"
    assert probe.local_policy and probe.chain is None and probe.no_endpoints_ref is None
    assert (
        probe.no_local_ref is not None
        and "has no local endpoints" in probe.no_local_ref[0].lines[probe.no_local_ref[1]]
    )
    assert (probe.cluster_ip, probe.port, probe.proto) == ("10.96.0.51", 80, "tcp")
    # internal Local + external Local: the ClusterIP goes to KUBE-SVL, KUBE-SVC still exists for the short-circuits
    assert both.local_policy and both.chain.startswith("KUBE-SVL-") and both.endpoints == ["10.244.1.14:8080"]
    # no endpoint anywhere: REJECT, whatever the policy
    assert not empty.local_policy and empty.no_endpoints_ref is not None


def test_the_programmed_table_marks_local_ports_alike_in_both_modes():
    """The lab-recorded itp-local fixtures (same Services, iptables and nftables mode, real kernel dumps) give the same
    table, L marks included, so one digest."""
    docs = {}
    for fixture in ("itp-local-iptables", "itp-local-nftables"):
        state = NodeState(Bundle.open(os.path.join(FIXTURES, fixture)))
        docs[fixture] = programmed.summary(state)
    ipt, nft = docs["itp-local-iptables"], docs["itp-local-nftables"]
    assert ipt["policy"] is True and nft["policy"] is True
    assert ipt["entries"] == nft["entries"] and ipt["digest"] == nft["digest"]
    local: set[str] = set()
    table = programmed.decode(ipt, local)
    assert local == {"10.96.0.50:80/tcp", "10.96.0.51:80/tcp"}
    assert (
        table["10.96.0.50:80/tcp"][2] == 1 and table["10.96.0.51:80/tcp"][2] == 0 and table["10.96.0.20:80/tcp"][2] == 3
    )


def test_decode_reads_tables_written_before_the_local_mark():
    old = {
        "entries": "10.96.0.10:53/udp\tkube-system/kube-dns:dns\t1f9347c02d\t2\nbroken line\n10.96.0.50:80/tcp\tshop/agent:http\tab\t1\tL"
    }
    local: set[str] = set()
    assert programmed.decode(old, local) == {
        "10.96.0.10:53/udp": ("kube-system/kube-dns:dns", "1f9347c02d", 2),
        "10.96.0.50:80/tcp": ("shop/agent:http", "ab", 1),
    }
    assert local == {"10.96.0.50:80/tcp"}

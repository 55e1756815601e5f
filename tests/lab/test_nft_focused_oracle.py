"""nftables mode's focused read (kube-proxy's table over netlink, kpdiag/collect/nft_netlink.py) against nft itself.

Every nftables-mode fixture's ruleset (its tables without xtables expressions: iptables-nft's own tables cannot be
loaded from JSON) and synthetic kube-proxy rulesets (NodePorts, Local policies, affinity, Services without
endpoints, IPv6) are loaded into a namespace. For each of the first Services of each ruleset:

- every chain the focused read returns equals ``nft -j list chain FAMILY TABLE NAME`` of that chain (declaration
  and rules, handles included: both come from the kernel). Nothing is normalised but the top-level ``metainfo``;
- every set and map it returns has the declaration ``nft -j list set|map`` prints, and its elements are elements
  nft lists (a subset: the read keeps the elements that can match the Service's packets);
- the focused bundle's findings about the Service and the traces of its ports equal the whole bundle's, word for
  word (as tests/lab/test_focused_differential.py does for iptables mode).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import pytest

from tests.lab.test_focused_differential import _files, _finding_key, _report, _strip_sources
from tests.checks.test_partial_bundles import SCOPED, _service
from tests.synth import Endpoint, Port, Service, many_services, nft_ruleset

from kpdiag.bundle import sources
from kpdiag.collect.iptables_focused import names_service

pytestmark = pytest.mark.lab

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "fixtures")
MAX_SERVICES = 4


def _nft_fixtures() -> list[str]:
    out = []
    for name in sorted(os.listdir(FIXTURES)):
        path = os.path.join(FIXTURES, name, sources.NFT_RULESET)
        if os.path.isfile(path) and '"kube-proxy"' in open(path).read():
            out.append(name)
    return out


FIXTURE_NAMES = _nft_fixtures()


def loadable(doc: dict) -> dict:
    """``nft -j list ruleset`` output as ``nft -j -f`` input: the tables without xtables expressions, each object an
    "add" without its handle; map elements last (they name chains)."""
    items = doc["nftables"]
    xt = {
        (i["rule"]["family"], i["rule"]["table"])
        for i in items
        if "rule" in i and any("xt" in e for e in i["rule"]["expr"])
    }
    # named objects (an admin's counter, quota, limit) come before the rules that name them
    rank = {"table": 0, "set": 1, "map": 1, "counter": 1, "quota": 1, "limit": 1, "chain": 2, "rule": 3}
    out, elems = [], []
    for item in items:
        ((kind, body),) = item.items()
        if kind == "metainfo":
            continue
        table = body["name"] if kind == "table" else body["table"]
        if (body["family"], table) in xt:
            continue
        body = {k: v for k, v in body.items() if k != "handle"}
        if kind in ("set", "map") and body.get("elem"):
            elem = {"family": body["family"], "table": table, "name": body["name"], "elem": body.pop("elem")}
            elems.append({"add": {"element": elem}})
        out.append({"add": {kind: body}})
    out.sort(key=lambda i: rank[next(iter(i["add"]))])
    return {"nftables": out + elems}


def _v6_services() -> list[Service]:
    return [
        Service("v6", "web", "fd00:10:96::10", [Port("http", 80, 8080, "tcp", node_port=30080)],
                [Endpoint("fd00:10:244::2", local=True), Endpoint("fd00:10:244::3")]),
        Service("v6", "dns", "fd00:10:96::a", [Port("dns", 53, 53, "udp")], [Endpoint("fd00:10:244::4")],
                affinity_seconds=300),
        Service("v6", "none", "fd00:10:96::20", [Port("http", 80, 8080, "tcp", node_port=30081)], []),
    ]  # fmt: skip


SYNTH = {
    "synth-60": lambda: nft_ruleset(many_services(60, 3, nodeport_every=3, local_every=2, affinity_every=5)),
    "synth-itp-local": lambda: nft_ruleset(
        [
            Service(
                "a",
                "itp",
                "10.96.1.10",
                [Port("http", 80, 8080)],
                [Endpoint("10.244.0.5"), Endpoint("10.244.0.6", local=True)],
                itp_local=True,
            ),
            Service("a", "itp-none", "10.96.1.11", [Port("http", 80, 8080)], [Endpoint("10.244.0.7")], itp_local=True),
            Service(
                "a",
                "etp",
                "10.96.1.12",
                [Port("http", 80, 8080, node_port=31000)],
                [Endpoint("10.244.0.8")],
                etp_local=True,
            ),
        ]  # fmt: skip
    ),
    "synth-dual-stack": lambda: (
        nft_ruleset(many_services(8, 2))
        + nft_ruleset(
            [
                Service(
                    "ns1",
                    "svc1",
                    "fd00:10:96::11",
                    [Port("http", 80, 8080, node_port=30001)],
                    [Endpoint("fd00:10:244::5")],
                )
            ],
            cluster_cidr="fd00:10:244::/64",
            service_cidr="fd00:10:96::/112",
            node_ips=("fd00:50::1",),
        )
    ),  # ns1/svc1 in table ip and table ip6 kube-proxy
    "synth-ipv6": lambda: nft_ruleset(
        _v6_services(), cluster_cidr="fd00:10:244::/64", service_cidr="fd00:10:96::/112", node_ips=("fd00:50::1",)
    ),  # fmt: skip
    # two ServiceCIDRs: cluster-ips-check tests the destination against an anonymous interval set
    "synth-two-service-cidrs": lambda: nft_ruleset(
        many_services(8, 2, service_cidr="10.96.0.0/16")
        + [
            dataclasses.replace(s, namespace="second")
            for s in many_services(4, 2, service_cidr="10.100.0.0/16", pod_cidr="10.245.0.0/16", nodeport_every=0)
        ],
        service_cidr="10.96.0.0/16, 10.100.0.0/16",
    ),
    # two loadBalancerSourceRanges: the Service's firewall chain tests the source against one
    "synth-two-source-ranges": lambda: _two_source_ranges(),
}


def _two_source_ranges() -> str:
    services = many_services(10, 2)
    svc = services[0]
    fw = f"firewall-RANGES00-{svc.namespace}/{svc.name}/tcp/http"
    return nft_ruleset(services) + (
        f"add chain ip kube-proxy {fw}\n"
        f"add rule ip kube-proxy {fw} ip saddr != {{ 10.1.0.0/16, 192.168.0.0/16 }} drop\n"
        f"add element ip kube-proxy firewall-ips {{ {svc.cluster_ip} . tcp . 80 : goto {fw} }}\n"
    )


def _services(doc: dict) -> list[str]:
    """NS/NAME of the Services in kube-proxy's maps (their chains, or the comment of a no-endpoint element); one in
    both families first."""
    seen: list[str] = []
    fams: dict[str, set] = {}
    for item in doc["nftables"]:
        body = item.get("map")
        if not body or body.get("table") != "kube-proxy":
            continue
        for key, verdict in body.get("elem", []):
            target = (verdict.get("goto") or verdict.get("jump") or {}).get("target", "")
            name = None
            if target.count("/") >= 3 and "-" in target:
                name = "/".join(target.split("-", 2)[2].split("/")[:2])
            elif isinstance(key, dict) and "elem" in key:
                name = key["elem"].get("comment", "").split(":")[0] or None
            if name:
                fams.setdefault(name, set()).add(body["family"])
            if name and name not in seen:
                seen.append(name)
    seen.sort(key=lambda n: -len(fams[n]))
    return seen[:MAX_SERVICES]


def _nft(lab, *args) -> dict:
    proc = lab.sh("node", ["nft", "-j", *args], check=False)
    assert proc.returncode == 0, (args, proc.stderr)
    return json.loads(proc.stdout)


def _check_against_nft(lab, focused: dict, svc: str) -> int:
    """Compare each kube-proxy chain, set and map of the focused ruleset with nft's own listing; the chains compared."""
    items = focused["nftables"]
    rules: dict[tuple, list] = {}
    for item in items:
        if "rule" in item and item["rule"]["table"] == "kube-proxy":
            r = item["rule"]
            rules.setdefault((r["family"], r["chain"]), []).append(item)
    n = 0
    for item in items:
        ((kind, body),) = item.items()
        if kind == "table" or body.get("table") != "kube-proxy":
            continue
        fam = body["family"]
        if kind == "chain":
            got = _nft(lab, "list", "chain", fam, "kube-proxy", body["name"])["nftables"]
            want = [i for i in got if "metainfo" not in i]
            assert [item] + rules.get((fam, body["name"]), []) == want, (svc, body["name"])
            n += 1
        elif kind in ("set", "map"):
            got = _nft(lab, "list", kind, fam, "kube-proxy", body["name"])["nftables"]
            ((_, full),) = [i.items() for i in got if kind in i][0]
            decl = {k: v for k, v in body.items() if k != "elem"}
            assert decl == {k: v for k, v in full.items() if k != "elem"}, (svc, body["name"])
            mine, theirs = body.get("elem", []), full.get("elem", [])
            assert all(e in theirs for e in mine), (svc, body["name"])
            assert [e for e in theirs if e in mine] == mine, (svc, body["name"], "order")  # nft's order
    return n


def _differential(base: dict, manifest: dict, got: dict, svc: str, name: str) -> None:
    full_files = {**base, **{k: v.encode() for k, v in got["full"].items()}}
    part_files = {**base, **{k: v.encode() for k, v in got["focused"].items()}}
    full = _report(full_files, manifest, svc)
    part = _report(part_files, {**manifest, "partial": got["partial"]}, svc)
    assert part.extra["partial"]["service"] == svc and part.extra["partial"]["mode"] == "nftables"
    assert part.facts["proxy_mode"] == full.facts["proxy_mode"], (name, svc)
    mine_full = sorted(_finding_key(f) for f in full.findings if _service(f) == svc)
    mine_part = sorted(_finding_key(f) for f in part.findings if _service(f) == svc)
    assert mine_part == mine_full, (name, svc)
    assert all(_service(f) in (None, svc) for f in part.findings), (name, svc)
    assert {f.id for f in part.findings} <= {f.id for f in full.findings}, (name, svc)
    skipped = {c.id: c.reason for c in part.checks if c.status == "skipped"}
    for f in full.findings:
        if _service(f) is None and f.id not in {g.id for g in part.findings} and f.id not in SCOPED:
            assert "partial bundle" in skipped.get(f.id, ""), (name, svc, f.id, skipped.get(f.id))
    assert part.extra.get("traces"), (name, svc, part.extra.get("notes"))
    assert _strip_sources(part.extra.get("traces")) == _strip_sources(full.extra.get("traces")), (name, svc)


def _run(lab, svc: str) -> dict:
    proc = lab.sh("node", [sys.executable, "-m", "tests.lab.focused_read", svc, "nftables"], check=False)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["reader"] == "NftablesFocused"
    assert got["fallback"] is None, got["fallback"]
    return got


def _exercise(lab, base: dict, manifest: dict, name: str) -> None:
    whole = _nft(lab, "list", "ruleset")
    services = _services(whole)
    assert services, f"{name}: no Service in kube-proxy's maps"
    for svc in services:
        got = _run(lab, svc)
        focused = json.loads(got["focused"][str(sources.NFT_RULESET)])
        assert _check_against_nft(lab, focused, svc) >= 8, (name, svc)  # the base chains at least
        chains = got["partial"]["chains"][str(sources.NFT_RULESET)]
        tables = {
            f"{i['table']['family']} kube-proxy"
            for i in whole["nftables"]
            if i.get("table", {}).get("name") == "kube-proxy"
        }
        assert set(chains) == tables, (name, svc, list(chains))  # every family's table walked
        big = [
            f"{i['map']['family']} kube-proxy"
            for i in whole["nftables"]
            if i.get("map", {}).get("name") == "service-ips" and len(i["map"].get("elem", [])) > 8
        ]
        left_out = (got["partial"].get("elements_left_out") or {}).get(str(sources.NFT_RULESET), {})
        assert all("service-ips" in left_out.get(t, {}) for t in big), (name, svc, left_out)  # reduced, not whole
        assert any(names_service(c.split("-", 2)[-1].replace("/", " ", 2).replace("/", " "), svc) for cs in
                   chains.values() for c in cs) or "reject" in json.dumps(focused), (name, svc)  # fmt: skip
        _differential(base, manifest, got, svc, name)


def test_fixtures_found():
    assert len(FIXTURE_NAMES) >= 10, FIXTURE_NAMES


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_focused_read_is_nfts(lab, name):
    d = os.path.join(FIXTURES, name)
    lab.add_ns("node")
    doc = json.load(open(os.path.join(d, sources.NFT_RULESET)))
    lab.sh("node", ["nft", "-j", "-f", "-"], input=json.dumps(loadable(doc)))
    base = _files(d)
    manifest = json.loads(base.pop("kpdiag.json"))
    for rel in list(base):
        if rel in (sources.NFT_RULESET, sources.IPTABLES_SAVE, sources.IP6TABLES_SAVE) or "tables-" in rel:
            base.pop(rel)  # the rules come from the namespace, in both bundles
    _exercise(lab, base, manifest, name)


@pytest.mark.parametrize("name", sorted(SYNTH))
def test_synth_focused_read_is_nfts(lab, name):
    lab.add_ns("node")
    lab.sh("node", ["nft", "-f", "-"], input=SYNTH[name](), timeout=300)
    _exercise(lab, {}, {"format": "kpdiag-bundle/1", "node": "lab-node"}, name)


def _kpdiag_node(lab, *args) -> dict:
    proc = lab.sh(
        "node",
        [
            sys.executable,
            "-m",
            "kpdiag",
            "node",
            "--no-api",
            "--host-root",
            "/",
            "-o",
            "json",
            "--fail-on",
            "never",
            *args,
        ],
        check=False,
    )
    assert proc.stdout, proc.stderr
    return json.loads(proc.stdout)


def test_live_nft_focused_then_fallback(lab):
    """kpdiag node --service end to end in nftables mode: the mode is found from kube-proxy's table (no kube-proxy
    process here), the bundle is partial and the Service traced; another Service's chain holding an expression the
    reader does not decode does not matter; the same expression in a chain every Service's packets meet makes the run
    read the whole ruleset, and the report says why."""
    services = many_services(40, 2)
    lab.add_ns("node")
    lab.sh("node", ["nft", "-f", "-"], input=nft_ruleset(services))
    good, other = "ns0/svc0", "ns2/svc2"
    whole = _nft(lab, "list", "ruleset")
    other_chain = next(
        i["chain"]["name"] for i in whole["nftables"] if "chain" in i and i["chain"]["name"].startswith("service-")
        and i["chain"]["name"].endswith(f"-{other}/tcp/http")
    )  # fmt: skip
    lab.sh("node", ["nft", "add", "rule", "ip", "kube-proxy", other_chain, "meta", "cpu", "1", "counter"])
    report = _kpdiag_node(lab, "--service", good)
    assert report["extra"]["partial"]["service"] == good and report["extra"]["partial"]["mode"] == "nftables"
    assert {t["target"].split(":")[0] for t in report["extra"]["traces"]} == {good}
    assert all(p["dnat"] for t in report["extra"]["traces"] for p in t["paths"])
    assert not any("focused read" in p["error"] for p in report["problems"])
    full = _kpdiag_node(lab, "--service", good, "--all-rules")
    assert "partial" not in full["extra"]
    assert _strip_sources(report["extra"]["traces"]) == _strip_sources(full["extra"]["traces"])

    lab.sh("node", ["nft", "insert", "rule", "ip", "kube-proxy", "services", "meta", "cpu", "1", "counter"])
    report = _kpdiag_node(lab, "--service", good)
    assert "partial" not in report["extra"]
    why = [p for p in report["problems"] if "focused read" in p["error"]]
    assert len(why) == 1 and why[0]["source"] == sources.NFT_RULESET, report["problems"]
    assert "meta key" in why[0]["error"] and "the whole rules were read" in why[0]["error"], why
    assert report["extra"]["traces"]  # the whole ruleset, traced


def test_another_services_element_for_this_services_address_is_read(lab):
    """An element of another Service in a verdict map, keyed by this Service's ClusterIP and port (firewall-ips:
    loadBalancerSourceRanges of a Service that took this address), is kept with the chain it sends to: the trace
    ends where the kernel sends the packet, as with the whole ruleset."""
    services = many_services(20, 2)
    lab.add_ns("node")
    text = nft_ruleset(services)
    evil = "firewall-EVILEVIL-evil/mitm/tcp/http"
    text += (
        f"add chain ip kube-proxy {evil}\n"
        f"add rule ip kube-proxy {evil} ip saddr != 10.1.0.0/16 drop\n"
        f"add element ip kube-proxy firewall-ips {{ {services[0].cluster_ip} . tcp . 80 : goto {evil} }}\n"
    )
    lab.sh("node", ["nft", "-f", "-"], input=text)
    svc = f"{services[0].namespace}/{services[0].name}"
    got = _run(lab, svc)
    focused = json.loads(got["focused"][str(sources.NFT_RULESET)])
    assert _check_against_nft(lab, focused, svc) >= 8
    fw = next(i["map"] for i in focused["nftables"] if i.get("map", {}).get("name") == "firewall-ips")
    assert [e[1] for e in fw["elem"]] == [{"goto": {"target": evil}}]
    assert any(i.get("chain", {}).get("name") == evil for i in focused["nftables"])
    _differential({}, {"format": "kpdiag-bundle/1", "node": "lab-node"}, got, svc, "firewall-hijack")


def test_a_host_firewalls_table_is_read_whole(lab):
    """The other nftables tables (here an inet table of a host firewall) are in the partial bundle whole, as in a full
    run: kube-proxy's table alone is read for the Service."""
    lab.add_ns("node")
    lab.sh("node", ["nft", "-f", "-"], input=nft_ruleset(many_services(10, 2)))
    lab.sh("node", ["nft", "add", "table", "inet", "hostfw"])
    lab.sh("node", ["nft", "add", "chain", "inet", "hostfw", "input", "{ type filter hook input priority 0; }"])
    lab.sh("node", ["nft", "add", "rule", "inet", "hostfw", "input", "tcp", "dport", "30080", "drop"])
    got = _run(lab, "ns1/svc1")
    text = got["focused"][str(sources.NFT_RULESET)]
    assert '"hostfw"' in text and "30080" in text
    assert list(got["partial"]["chains"][str(sources.NFT_RULESET)]) == ["ip kube-proxy"]
    _differential({}, {"format": "kpdiag-bundle/1", "node": "lab-node"}, got, "ns1/svc1", "hostfw")


def _one_service_node(lab) -> None:
    lab.add_ns("node")
    lab.sh("node", ["sysctl", "-qw", "net.ipv4.ip_forward=1"])
    svc = Service("default", "a", "10.96.0.10", [Port("http", 80, 8080)], [Endpoint("10.244.0.5")])
    lab.sh("node", ["nft", "-f", "-"], input=nft_ruleset([svc]))


def _same_trace_as_whole(lab, service: str) -> dict:
    report = _kpdiag_node(lab, "--service", service)
    assert report["extra"]["partial"]["mode"] == "nftables", report["problems"]
    full = _kpdiag_node(lab, "--service", service, "--all-rules")
    assert "partial" not in full["extra"] and full["extra"]["traces"]
    assert _strip_sources(report["extra"]["traces"]) == _strip_sources(full["extra"]["traces"])
    return report


def test_another_tables_base_chains_are_not_read_as_kube_proxys(lab):
    """The kernel's chain dump asked for one table may answer with every table's chains: iptables-nft's
    ``ip filter FORWARD`` (policy drop, pod traffic accepted by its rules) is not a base chain of kube-proxy's table,
    so the focused trace is the whole dump's (forwarded to the endpoint), not a drop by a chain without its rules."""
    _one_service_node(lab)
    for args in (["-P", "FORWARD", "DROP"], ["-A", "FORWARD", "-d", "10.244.0.0/16", "-j", "ACCEPT"],
                 ["-A", "FORWARD", "-s", "10.244.0.0/16", "-j", "ACCEPT"]):  # fmt: skip
        lab.sh("node", ["iptables-nft", *args])
    _same_trace_as_whole(lab, "default/a")
    chains = _run(lab, "default/a")["partial"]["chains"][str(sources.NFT_RULESET)]["ip kube-proxy"]
    assert "FORWARD" not in chains and "filter-forward" in chains, chains


def test_a_base_chain_of_the_same_name_in_another_table_is_not_kube_proxys(lab):
    """A table ``ip other`` with a base chain named as kube-proxy's ``nat-prerouting``: kube-proxy's is read with its
    own declaration and rules (checked against ``nft list chain``), and the focused trace is the whole dump's."""
    _one_service_node(lab)
    lab.sh("node", ["nft", "add", "table", "ip", "other"])
    lab.sh("node", ["nft", "add chain ip other nat-prerouting { type nat hook prerouting priority 10; }"])
    lab.sh("node", ["nft", "add rule ip other nat-prerouting counter"])
    _same_trace_as_whole(lab, "default/a")
    got = _run(lab, "default/a")
    focused = json.loads(got["focused"][str(sources.NFT_RULESET)])
    assert _check_against_nft(lab, focused, "default/a") >= 8
    chains = [i["chain"] for i in focused["nftables"] if i.get("chain", {}).get("name") == "nat-prerouting"]
    assert sorted(c["table"] for c in chains) == ["kube-proxy", "other"], chains


CHANGE_DURING_WALK = """
import subprocess, sys
from kpdiag.collect import nft_netlink as nn
from kpdiag.collect.service_rules import NftWalk, NotFocused

class Writer(nn.Netlink):
    '''Netlink whose first chain read is followed by a real change of the ruleset (nft add rule): the kernel's
    answers are untouched.'''
    def __init__(self, change):
        super().__init__()
        self.change = change
    def rules(self, family, table, chain):
        got = super().rules(family, table, chain)
        if self.change:
            subprocess.run(["nft", "add", "rule", "ip", "kube-proxy", chain, "counter"], check=True)
            self.change = False
        return got

change = sys.argv[1] == "change"
with Writer(change) as nl:
    try:
        items = NftWalk(nl, "ip", "kube-proxy", "default/a").walk()
        print("read", len(items))
    except NotFocused as exc:
        print("not focused:", exc)
"""


def test_a_change_during_the_walk_reads_the_whole_dump(lab):
    """The walk reads the ruleset's generation before and after its many dumps: a rule added between two of its reads
    (here by nft, after the first chain is read) makes it not focused, saying why (the whole dump is read instead);
    with no change the same walk is focused."""
    _one_service_node(lab)
    quiet = lab.sh("node", [sys.executable, "-c", CHANGE_DURING_WALK, "none"]).stdout
    assert quiet.startswith("read "), quiet
    changed = lab.sh("node", [sys.executable, "-c", CHANGE_DURING_WALK, "change"]).stdout
    assert changed.strip() == "not focused: table ip kube-proxy changed while it was read (a rule was written)", changed

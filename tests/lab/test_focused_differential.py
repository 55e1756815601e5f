"""`kpdiag node --service`'s focused read against the whole dump, on the real kernel, over every fixture scenario.

Each iptables-mode node fixture's rules are loaded into a namespace (iptables-restore); for each Service in its
KUBE-SERVICES, kpdiag's focused read (iptables -S chain by chain, kpdiag/collect/service_rules.py) and the whole dump are taken
from that kernel, put into the fixture's bundle in place of its rules, and analysed: the Service's findings and the
traces of its ports must be the same, and the partial bundle must never say anything the whole one does not.
"""

from __future__ import annotations

import json
import os
import re
import sys

import pytest

# the iptables-mode node fixtures, and which Service a finding is about: as the partial-bundle test decides them
from tests.checks.test_partial_bundles import FIXTURE_NAMES, FIXTURES, SCOPED, _service

from kpdiag.bundle import sources
from kpdiag.bundle.store import Bundle
from kpdiag.commands.diagnose import analyze_state
from kpdiag.commands.focus import focus_report
from kpdiag.state.node import NodeState

pytestmark = pytest.mark.lab

MAX_SERVICES = 4  # per fixture: the first ones in KUBE-SERVICES order
_NAME = re.compile(r'--comment "?([^ :"]+/[^ :"]+)[: ]')


def _services(text: str) -> list[str]:
    seen: list[str] = []
    in_nat = False
    for line in text.splitlines():
        if line.startswith("*"):
            in_nat = line == "*nat"
        if in_nat and line.startswith("-A KUBE-SERVICES ") and ("-j KUBE-SVC-" in line or "-j KUBE-SVL-" in line):
            m = _NAME.search(line)
            if m and m.group(1) not in seen:
                seen.append(m.group(1))
    return seen[:MAX_SERVICES]


def _files(d: str) -> dict[str, bytes]:
    out = {}
    for dirpath, _, names in os.walk(d):
        for n in names:
            path = os.path.join(dirpath, n)
            rel = os.path.relpath(path, d)
            if rel != "scenario.json":
                out[rel] = open(path, "rb").read()
    return out


def _finding_key(f) -> tuple:
    return (f.id, f.subject, f.summary)


def _strip_sources(obj):
    """A trace with the file:line of each step left out (the partial file is shorter: same rules, other lines)."""
    if isinstance(obj, dict):
        return {k: _strip_sources(v) for k, v in obj.items() if k not in ("source", "sources")}
    if isinstance(obj, list):
        return [_strip_sources(v) for v in obj]
    if isinstance(obj, str):
        return re.sub(r"node/ip6?tables-save\.txt:\d+", "RULES:LINE", obj)
    return obj


def _report(files: dict[str, bytes], manifest: dict, svc: str):
    files = dict(files)
    files["kpdiag.json"] = json.dumps(manifest).encode()
    state = NodeState(Bundle.from_files("lab-node", files))
    report = analyze_state(state)
    return focus_report(report, state, service=svc)


def _load(lab, d: str) -> str | None:
    """Load the fixture's rules into a fresh namespace; why not, when the kernel refuses them."""
    lab.add_ns("node")
    sets = os.path.join(d, sources.IPSET)
    if os.path.isfile(sets) and os.path.getsize(sets):  # the sets the rules match (a CNI's: Antrea's ANTREA-POD-IP)
        proc = lab.sh("node", ["ipset", "restore"], input=open(sets).read(), check=False)
        if proc.returncode != 0:
            return f"ipset restore: {proc.stderr.strip()[:200]}"
    for rel, tool in ((sources.IPTABLES_SAVE, "iptables-restore"), (sources.IP6TABLES_SAVE, "ip6tables-restore")):
        path = os.path.join(d, rel)
        if os.path.isfile(path):
            proc = lab.sh("node", [tool], input=open(path).read(), check=False)
            if proc.returncode != 0:
                return f"{tool}: {proc.stderr.strip()[:200]}"
    return None


def test_fixture_scenarios_found():
    assert len(FIXTURE_NAMES) >= 30, FIXTURE_NAMES


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_focused_equals_full(lab, name):
    d = os.path.join(FIXTURES, name)
    why = _load(lab, d)
    # every iptables-mode fixture is a ruleset the kernel takes (recorded from a lab, or written as kube-proxy does)
    assert why is None, why
    base = _files(d)
    manifest = json.loads(base.pop("kpdiag.json"))
    services = _services(open(os.path.join(d, sources.IPTABLES_SAVE)).read())
    assert services, f"{name}: no Service in KUBE-SERVICES"
    for svc in services:
        proc = lab.sh("node", [sys.executable, "-m", "tests.lab.focused_read", svc], check=False)
        assert proc.returncode == 0, proc.stderr
        got = json.loads(proc.stdout)
        assert got["fallback"] is None, got["fallback"]
        full_files = {**base, **{k: v.encode() for k, v in got["full"].items()}}
        part_files = {**base, **{k: v.encode() for k, v in got["focused"].items()}}
        full = _report(full_files, manifest, svc)
        part = _report(part_files, {**manifest, "partial": got["partial"]}, svc)
        assert part.extra["partial"]["service"] == svc
        assert part.facts["iptables_backend"] == full.facts["iptables_backend"] == "nf_tables"
        assert part.facts["proxy_mode"] == full.facts["proxy_mode"]
        # the Service's findings: the same, word for word
        mine_full = sorted(_finding_key(f) for f in full.findings if _service(f) == svc)
        mine_part = sorted(_finding_key(f) for f in part.findings if _service(f) == svc)
        assert mine_part == mine_full, (name, svc)
        # nothing about another Service (their rules were not read: no "missing" port that was simply not read)
        assert all(_service(f) in (None, svc) for f in part.findings), (name, svc)
        # the node's findings: the whole rules' (a check that judges every Service's rules is skipped, saying why;
        # one that samples a Service port, such as KP207, may sample this one)
        assert {f.id for f in part.findings} <= {f.id for f in full.findings}, (name, svc)
        skipped = {c.id: c.reason for c in part.checks if c.status == "skipped"}
        for f in full.findings:
            if _service(f) is None and f.id not in {g.id for g in part.findings} and f.id not in SCOPED:
                assert "partial bundle" in skipped.get(f.id, ""), (name, svc, f.id, skipped.get(f.id))
        assert part.extra["traces"], (name, svc, part.extra.get("notes"))
        assert _strip_sources(part.extra["traces"]) == _strip_sources(full.extra["traces"]), (name, svc)


def _kpdiag_node(lab, *args):
    import shutil

    exe = shutil.which("kpdiag")
    argv = [exe] if exe else [sys.executable, "-m", "kpdiag"]
    proc = lab.sh(
        "node", argv + ["node", "--no-api", "--host-root", "/", "-o", "json", "--fail-on", "never", *args], check=False
    )
    assert proc.stdout, proc.stderr
    return json.loads(proc.stdout)


def _svc_chains(text: str) -> list[tuple[str, str]]:
    """(NS/NAME, its KUBE-SVC chain) of each Service with endpoints, in KUBE-SERVICES order."""
    return re.findall(r'^-A KUBE-SERVICES .*--comment "([^: ]+):\S+ cluster IP".* -j (KUBE-SVC-\S+)$', text, re.M)


def test_live_focused_then_fallback(lab):
    """kpdiag node --service end to end: partial and traced; a chain of another Service that iptables cannot show does
    not matter; one of this Service's makes the run read the whole rules, and the report says why."""
    from tests.synth import iptables_ruleset, many_services

    text = iptables_ruleset(many_services(40, 2))
    (good, _), (bad, bad_chain) = _svc_chains(text)[:2]
    lab.add_ns("node")
    lab.sh("node", ["iptables-restore"], input=text)
    # a rule iptables-nft cannot translate back (iptables -S of that chain exits 3), in another Service's chain
    lab.sh("node", ["nft", "add", "rule", "ip", "nat", bad_chain, "meta", "cpu", "1", "counter"])
    report = _kpdiag_node(lab, "--service", good)
    assert report["extra"]["partial"]["service"] == good
    assert {t["target"].split(":")[0] for t in report["extra"]["traces"]} == {good}
    assert all(p["dnat"] for t in report["extra"]["traces"] for p in t["paths"])
    assert not any("focused read" in p["error"] for p in report["problems"])

    report = _kpdiag_node(lab, "--service", bad)
    assert "partial" not in report["extra"]
    why = [p["error"] for p in report["problems"] if "focused read" in p["error"]]
    assert len(why) == 1 and f"-S {bad_chain} exited 3" in why[0], report["problems"]
    assert "the whole rules were read" in why[0]
    # here the whole dump fails as well (iptables-save exits 3 on that rule): said, not hidden
    assert any(
        p["source"] == sources.IPTABLES_SAVE and "iptables-save exited 3" in p["error"] for p in report["problems"]
    )


HIJACK = (
    '-A KUBE-SERVICES -d 10.96.0.20/32 -p tcp -m comment --comment "evil/mitm:http external IP" -m tcp --dport 80 '
    "-j KUBE-EXT-EVILEVILEVILEVIL\n"
)


@pytest.mark.parametrize("comment", ["evil/mitm:http external IP", "shop/web-2:http cluster IP"])
def test_another_services_rule_that_takes_this_services_packets_is_read(lab, comment):
    """A rule of another Service (a leftover of a deleted one, an externalIPs hijack of this ClusterIP, a Service
    named like this one's prefix) that matches this Service's address and port before its own rule takes its packets:
    the focused read follows it, so the trace ends where the kernel sends the packet (not at this Service's pods)."""
    d = os.path.join(FIXTURES, "healthy-iptables")
    text = open(os.path.join(d, sources.IPTABLES_SAVE)).read()
    own = '-A KUBE-SERVICES -d 10.96.0.20/32 -p tcp -m comment --comment "shop/web:http cluster IP"'
    assert own in text
    evil = (
        ":KUBE-EXT-EVILEVILEVILEVIL - [0:0]\n:KUBE-SEP-EVILEVILEVILEVIL - [0:0]\n"
        '-A KUBE-EXT-EVILEVILEVILEVIL -m comment --comment "x" -j KUBE-SEP-EVILEVILEVILEVIL\n'
        "-A KUBE-SEP-EVILEVILEVILEVIL -p tcp -m tcp -j DNAT --to-destination 10.244.6.6:80\n"
    )
    hijack = HIJACK.replace("evil/mitm:http external IP", comment)
    text = text.replace("*nat\n", "*nat\n" + evil.split("-A ", 1)[0], 1)
    text = text.replace(own, hijack + evil[evil.index("-A ") :] + own, 1)
    lab.add_ns("node")
    lab.sh("node", ["iptables-restore"], input=text)
    base = _files(d)
    manifest = json.loads(base.pop("kpdiag.json"))
    proc = lab.sh("node", [sys.executable, "-m", "tests.lab.focused_read", "shop/web"], check=False)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert "KUBE-EXT-EVILEVILEVILEVIL" in got["focused"][sources.IPTABLES_SAVE]
    full = _report({**base, **{k: v.encode() for k, v in got["full"].items()}}, manifest, "shop/web")
    part = _report(
        {**base, **{k: v.encode() for k, v in got["focused"].items()}},
        {**manifest, "partial": got["partial"]},
        "shop/web",
    )
    assert _strip_sources(part.extra["traces"]) == _strip_sources(full.extra["traces"])
    dnats = {p["dnat"] for t in part.extra["traces"] for p in t["paths"] if p.get("dnat")}
    assert dnats == {"10.244.6.6:80"}, dnats


EVIL_CHAINS = (
    ":KUBE-EXT-EVILEVILEVILEVIL - [0:0]\n:KUBE-SEP-EVILEVILEVILEVIL - [0:0]\n",
    '-A KUBE-EXT-EVILEVILEVILEVIL -m comment --comment "x" -j KUBE-SEP-EVILEVILEVILEVIL\n'
    "-A KUBE-SEP-EVILEVILEVILEVIL -p tcp -m tcp -j DNAT --to-destination 10.244.6.6:80\n",
)
TAKERS = {
    # a host chain, reached from PREROUTING before kube-proxy's, sends shop/web's ClusterIP:port elsewhere
    "host-chain": (
        "healthy-iptables",
        "shop/web",
        ":MYHIJACK - [0:0]\n",
        "-I PREROUTING 1 -j MYHIJACK\n-A MYHIJACK -d 10.96.0.20/32 -p tcp -m tcp --dport 80 -j KUBE-EXT-EVILEVILEVILEVIL\n",
    ),
    # a negated destination in KUBE-SERVICES (every address but another one)
    "negated": (
        "healthy-iptables",
        "shop/web",
        "",
        "-I KUBE-SERVICES 1 ! -d 10.96.5.5/32 -p tcp -m tcp --dport 80 -j KUBE-EXT-EVILEVILEVILEVIL\n",
    ),
    # a prefix and a port range that hold the ClusterIP and its port
    "prefix-and-range": (
        "healthy-iptables",
        "shop/web",
        "",
        "-I KUBE-SERVICES 1 -d 10.96.0.0/16 -p tcp -m tcp --dport 1:1000 -j KUBE-EXT-EVILEVILEVILEVIL\n",
    ),
    # another Service's externalIP is the node's address, at this Service's NodePort
    "externalip-on-nodeport": (
        "nodeport-etp-local",
        "shop/front",
        "",
        "-I KUBE-SERVICES 1 -d 192.168.50.1/32 -p tcp -m tcp --dport 30080 -j KUBE-EXT-EVILEVILEVILEVIL\n",
    ),
}


@pytest.mark.parametrize("case", sorted(TAKERS))
def test_a_rule_anywhere_that_can_take_this_services_packets_is_followed(lab, case):
    """Another Service's chain entered from a rule that can match one of this Service's packets — its address and
    port as a prefix, a range, negated, in a host chain reached before kube-proxy's, or at a node address on this
    Service's NodePort — is read, and the focused trace equals the whole dump's (before, only a rule repeating this
    Service's own ``-d`` string in the same chain was followed, and the focused trace went to the Service's pods)."""
    fixture, svc, decl, rules = TAKERS[case]
    d = os.path.join(FIXTURES, fixture)
    text = open(os.path.join(d, sources.IPTABLES_SAVE)).read()
    lab.add_ns("node")
    lab.sh("node", ["iptables-restore"], input=text)
    for line in (decl + EVIL_CHAINS[0]).splitlines():
        lab.sh("node", ["iptables", "-t", "nat", "-N", line[1:].split()[0]])
    for line in (EVIL_CHAINS[1] + rules).splitlines():
        lab.sh("node", ["iptables", "-t", "nat", *line.split()])
    base = _files(d)
    manifest = json.loads(base.pop("kpdiag.json"))
    proc = lab.sh("node", [sys.executable, "-m", "tests.lab.focused_read", svc], check=False)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert "-A KUBE-SEP-EVILEVILEVILEVIL" in got["focused"][sources.IPTABLES_SAVE], case
    full = _report({**base, **{k: v.encode() for k, v in got["full"].items()}}, manifest, svc)
    part = _report(
        {**base, **{k: v.encode() for k, v in got["focused"].items()}}, {**manifest, "partial": got["partial"]}, svc
    )
    assert _strip_sources(part.extra["traces"]) == _strip_sources(full.extra["traces"])
    if case != "externalip-on-nodeport":  # the report traces the ClusterIP (the chain read is asserted above)
        dnats = {p["dnat"] for t in part.extra["traces"] for p in t["paths"] if p.get("dnat")}
        assert "10.244.6.6:80" in dnats, dnats


def test_ipv6_rules_and_a_host_firewalls_own_tables_are_read(lab):
    """The focused read lists the tables of every family over netlink: ip6tables' chains and an inet table of a host
    firewall are in the partial bundle as in the whole one."""
    d = os.path.join(FIXTURES, "healthy-iptables")
    lab.add_ns("node")
    lab.sh("node", ["iptables-restore"], input=open(os.path.join(d, sources.IPTABLES_SAVE)).read())
    lab.sh(
        "node",
        ["ip6tables-restore"],
        input="*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -j KUBE-SERVICES\nCOMMIT\n",
    )
    lab.sh("node", ["nft", "add", "table", "inet", "hostfw"])
    lab.sh("node", ["nft", "add", "chain", "inet", "hostfw", "input", "{ type filter hook input priority 0; }"])
    lab.sh("node", ["nft", "add", "rule", "inet", "hostfw", "input", "tcp", "dport", "30080", "drop"])
    proc = lab.sh("node", [sys.executable, "-m", "tests.lab.focused_read", "shop/web"], check=False)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert sources.IP6TABLES_SAVE in got["focused"] and "KUBE-SERVICES" in got["focused"][sources.IP6TABLES_SAVE]
    assert '"hostfw"' in got["focused"][sources.NFT_RULESET] and "30080" in got["focused"][sources.NFT_RULESET]

"""A live ``kpdiag trace`` in nftables mode reads kube-proxy's table for its destination only
(kpdiag/collect/dest_rules.py :class:`DestWalk`): checked against the whole dump on the real kernel.

Every nftables-mode fixture's ruleset (as tests/lab/test_nft_focused_oracle.py loads it) and synthetic kube-proxy
rulesets are loaded into a namespace with a node address in each family; the packets are every key of kube-proxy's
verdict maps as nft lists them (ClusterIPs, external and load-balancer IPs, firewall and no-endpoint entries, each
port and protocol), every NodePort at the node's addresses and at those of the nodeport-ips set, and packets that
match nothing (a wrong port, another protocol, an address no rule names, ICMP), each from outside and from the node
where it is a Service's. The trace through the focused read must equal the trace through the whole dump exactly
(rule sources aside: the handles are the same, the file is shorter), and the focused read must say what it held.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.lab.test_focused_differential import _strip_sources
from tests.lab.test_trace_focused_differential import _compare
from tests.lab.test_nft_focused_oracle import FIXTURE_NAMES, FIXTURES, SYNTH, loadable
from tests.synth import many_services, nft_ruleset

from kpdiag.bundle import sources

pytestmark = pytest.mark.lab

NODE = {4: "10.31.0.10", 6: "fd00:31::10"}
OUTSIDE = {4: "10.31.0.99", 6: "fd00:31::99"}
MAX_DESTS = 24  # destinations per family and fixture (each a focused read of its own), spread over the maps' keys
NFT = str(sources.NFT_RULESET)


def _node(lab) -> None:
    lab.add_ns("node")
    lab.sh("node", ["sysctl", "-qw", "net.ipv4.ip_forward=1"])
    lab.sh("node", ["ip", "link", "add", "kp0", "type", "veth", "peer", "name", "kp1"])
    lab.sh("node", ["ip", "addr", "add", f"{NODE[4]}/24", "dev", "kp0"])
    lab.sh("node", ["ip", "-6", "addr", "add", f"{NODE[6]}/64", "dev", "kp0", "nodad"])
    lab.sh("node", ["ip", "link", "set", "kp0", "up"])
    lab.sh("node", ["ip", "link", "set", "kp1", "up"])


def _whole(lab) -> dict:
    proc = lab.sh("node", ["nft", "-j", "list", "ruleset"])
    return json.loads(proc.stdout)


def _key(elem):
    key = elem[0] if isinstance(elem, list) else elem
    key = key["elem"]["val"] if isinstance(key, dict) and "elem" in key else key
    return key["concat"] if isinstance(key, dict) and "concat" in key else [key]


def destinations(doc: dict, limit: int = MAX_DESTS) -> dict[int, list[tuple[str, str, int | None]]]:
    """(address, protocol, port) per family: every key of kube-proxy's maps keyed by address, protocol and port; the
    NodePorts (maps keyed by protocol and port) at the node's address and at each address of its nodeport-ips set;
    then an address no rule names, and ICMP."""
    keyed: dict[int, list] = {4: [], 6: []}
    nodeports: dict[int, list] = {4: [], 6: []}
    node_ips: dict[int, list] = {4: [NODE[4]], 6: [NODE[6]]}
    for item in doc["nftables"]:
        body = item.get("map") or item.get("set")
        if not body or body.get("table") != "kube-proxy":
            continue
        fam = 6 if body["family"] == "ip6" else 4
        for elem in body.get("elem", []):
            parts = _key(elem)
            if len(parts) == 3 and isinstance(parts[2], int):
                keyed[fam].append((str(parts[0]), parts[1], parts[2]))
            elif len(parts) == 2 and isinstance(parts[1], int):
                nodeports[fam].append((parts[0], parts[1]))
            elif body["name"] == "nodeport-ips" and isinstance(parts[0], str):
                node_ips[fam].append(parts[0])
    out = {}
    for fam in (4, 6):
        dests = list(dict.fromkeys(keyed[fam]))
        for proto, port in dict.fromkeys(nodeports[fam]):
            dests += [(ip, proto, port) for ip in dict.fromkeys(node_ips[fam])]
        dests = list(dict.fromkeys(dests))
        if len(dests) > limit:
            dests = dests[:: len(dests) // (limit - 1)][: limit - 1] + dests[-1:]
        if not dests and fam == 6:
            continue
        misses = [("192.0.2.77" if fam == 4 else "2001:db8::77", "tcp", 80), (NODE[fam], "tcp", 22)]
        for addr, proto, port in dests[:3]:
            misses += [(addr, proto, port + 1), (addr, "udp" if proto == "tcp" else "tcp", port), (addr, "icmp", None)]
        out[fam] = [("svc", d) for d in dests] + [("miss", d) for d in dict.fromkeys(misses)]
    return out


def packets_for(doc: dict, limit: int = MAX_DESTS) -> list[dict]:
    pkts = []
    for fam, dests in destinations(doc, limit).items():
        for kind, (addr, proto, port) in dests:
            one = {"dst": addr, "proto": proto, "dport": port}
            pkts.append({"src": OUTSIDE[fam], "origin": "external", **one})
            if kind == "svc":
                pkts.append({"src": NODE[fam], "origin": "node", **one})
    return pkts


def _exercise(lab, limit: int = MAX_DESTS) -> list[dict]:
    pkts = packets_for(_whole(lab), limit)
    assert len(pkts) >= 8, pkts
    got = _compare(lab, pkts)  # each focused trace equals the whole dump's
    for one in got:
        assert one["read"]["mode"] == "nftables" and one["read"]["destination"], one["read"]
        assert "kube-proxy" in " ".join(one["read"]["chains"][NFT]), one["read"]
        assert one["full"]["mode"] == "nftables"
    return got


def test_fixtures_found():
    assert len(FIXTURE_NAMES) >= 10, FIXTURE_NAMES


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_focused_trace_equals_whole(lab, name):
    _node(lab)
    doc = json.load(open(os.path.join(FIXTURES, name, sources.NFT_RULESET)))
    lab.sh("node", ["nft", "-j", "-f", "-"], input=json.dumps(loadable(doc)))
    _exercise(lab)


@pytest.mark.parametrize("name", sorted(SYNTH))
def test_synth_focused_trace_equals_whole(lab, name):
    _node(lab)
    lab.sh("node", ["nft", "-f", "-"], input=SYNTH[name](), timeout=300)
    _exercise(lab)


def _hijacked() -> tuple[str, dict]:
    """Elements of OTHER Services that take a Service's packets: a firewall-ips entry on svc0's ClusterIP and port,
    a service-ips entry (an externalIP) on the node's own address at a NodePort of another Service, a
    no-endpoint-services entry on svc2's ClusterIP at another port, and a NodePort without endpoints."""
    services = many_services(30, 2, nodeport_every=3)
    text = nft_ruleset(services, node_ips=(NODE[4],))
    fw = "firewall-EVILEVIL-evil/mitm/tcp/http"
    ext = "external-EVILEXT0-evil/ext/tcp/http"
    nodeport = next(p.node_port for s in services for p in s.ports if p.node_port)
    text += (
        f"add chain ip kube-proxy {fw}\n"
        f"add rule ip kube-proxy {fw} ip saddr != 10.1.0.0/16 drop\n"
        f"add element ip kube-proxy firewall-ips {{ {services[0].cluster_ip} . tcp . 80 : goto {fw} }}\n"
        f"add chain ip kube-proxy {ext}\n"
        f"add rule ip kube-proxy {ext} ip daddr {NODE[4]} tcp dport {nodeport} dnat to 10.244.9.10:9090\n"
        f"add element ip kube-proxy service-ips {{ {NODE[4]} . tcp . {nodeport} : goto {ext} }}\n"
        f'add element ip kube-proxy no-endpoint-services {{ {services[2].cluster_ip} . udp . 53 comment "evil/gone:dns" '
        ": goto reject-chain }\n"
        'add element ip kube-proxy no-endpoint-nodeports { udp . 31999 comment "evil/gone:dns" : drop }\n'
    )
    facts = {"svc0": services[0].cluster_ip, "svc2": services[2].cluster_ip, "other": services[5].cluster_ip}
    return text, {**facts, "nodeport": nodeport, "fw": fw, "ext": ext}


def test_another_services_elements_that_take_the_packet_are_read(lab):
    """The focused read keeps every element whose key the packet can match, whoever's it is: the trace ends where the
    kernel sends the packet (the other Service's firewall chain, its externalIP's DNAT before the NodePort map, its
    no-endpoint reject, a NodePort's drop), as with the whole ruleset; a packet to another ClusterIP reads none of
    those chains."""
    _node(lab)
    text, f = _hijacked()
    lab.sh("node", ["nft", "-f", "-"], input=text)
    got = _exercise(lab, limit=1000)  # every key
    by = {}
    for one in got:
        p = one["packet"]
        by.setdefault((p["dst"], p["proto"], p["dport"]), []).append(one)

    def chains(key):
        return {c for one in by[key] for c in one["read"]["chains"][NFT]["ip kube-proxy"]}

    assert f["fw"] in chains((f["svc0"], "tcp", 80))
    hijacked = by[(NODE[4], "tcp", f["nodeport"])]
    assert f["ext"] in chains((NODE[4], "tcp", f["nodeport"]))
    assert {p["dnat"] for one in hijacked for p in one["focused"]["paths"]} == {"10.244.9.10:9090"}, hijacked
    gone = [one for one in by[(f["svc2"], "udp", 53)] if one["packet"]["origin"] == "external"]
    assert {p["verdict"] for one in gone for p in one["focused"]["paths"]} == {"reject"}, gone
    assert "reject-chain" in chains((f["svc2"], "udp", 53)) and "reject-chain" not in chains((f["other"], "tcp", 80))
    dropped = [one for one in by[(NODE[4], "udp", 31999)] if one["packet"]["origin"] == "external"]
    assert {p["verdict"] for one in dropped for p in one["focused"]["paths"]} == {"drop"}, dropped
    mine = chains((f["other"], "tcp", 80))
    assert not any("evil" in c for c in mine), mine
    assert not any(c.startswith("service-") and "/svc0/" in c for c in mine), mine


def _kpdiag_trace(lab, *args, codes=(0, 4, 5)):
    argv = [sys.executable, "-m", "kpdiag", "trace", "--host-root", "/", "--src", OUTSIDE[4], "-o", "json", *args]
    proc = lab.sh("node", argv, check=False)
    assert proc.returncode in codes, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return (json.loads(proc.stdout) if proc.stdout else None), proc.stderr


def test_live_trace_end_to_end_and_its_fallback(lab):
    """`kpdiag trace` on an nftables node: focused (it says how many chains it read and how many map elements it
    left out), the same answer as --all-rules (which reads everything and says nothing of a focused read); an
    expression the reader does not decode on the packet's path makes it read the whole dump, saying why."""
    services = many_services(40, 2)
    _node(lab)
    lab.sh("node", ["nft", "-f", "-"], input=nft_ruleset(services))
    svc = services[0]
    dst = f"{svc.cluster_ip}:{svc.ports[0].port}"
    focused, said = _kpdiag_trace(lab, "--dst", dst)
    whole, said_whole = _kpdiag_trace(lab, "--dst", dst, "--all-rules")
    assert f"a packet to {dst}/tcp can meet" in said and "read only the" in said, said
    assert "elements left out)" in said, said
    assert "read only" not in said_whole and "focused read" not in said_whole, said_whole
    assert focused["read"]["destination"] == f"{dst}/tcp" and focused["read"]["mode"] == "nftables"
    elems = next(i["map"]["elem"] for i in _whole(lab)["nftables"] if i.get("map", {}).get("name") == "service-ips")
    others = [e for e in elems if _key(e)[0] != svc.cluster_ip]
    assert focused["read"]["elements_left_out"][NFT]["ip kube-proxy"]["service-ips"] == len(others)
    assert "read" not in whole
    assert _strip_sources({k: v for k, v in focused.items() if k != "read"}) == _strip_sources(whole)
    assert focused["mode"] == "nftables" and any(p["dnat"] for p in focused["paths"])
    # an expression the reader does not decode, in a chain every packet meets: the whole dump, and why
    lab.sh("node", ["nft", "insert", "rule", "ip", "kube-proxy", "services", "meta", "cpu", "1", "counter"])
    traced, said = _kpdiag_trace(lab, "--dst", dst)
    assert f"focused read of the rules a packet to {dst}/tcp can meet not possible" in said, said
    assert "meta key" in said and "the whole rules were read" in said, said
    assert "read" not in traced and any(p["dnat"] for p in traced["paths"])


def test_an_interval_set_on_the_path_is_read_focused(lab):
    """Two loadBalancerSourceRanges make kube-proxy's firewall chain test the source against an anonymous interval set,
    and two ServiceCIDRs make cluster-ips-check test the destination against one: both are decoded, so a packet
    whose path meets them is still read focused, and traced as the whole dump traces it (dropped)."""
    services = many_services(10, 2)
    _node(lab)
    svc = services[0]
    lab.sh("node", ["ip", "route", "add", "default", "dev", "kp0"])  # so a ClusterIP without rules is forwarded
    fw = f"firewall-RANGES00-{svc.namespace}/{svc.name}/tcp/http"
    lab.sh("node", ["nft", "-f", "-"], input=nft_ruleset(services, service_cidr="10.96.0.0/16, 10.100.0.0/16") + (
        f"add chain ip kube-proxy {fw}\n"
        f"add rule ip kube-proxy {fw} ip saddr != {{ 10.1.0.0/16, 192.168.0.0/16 }} drop\n"
        f"add element ip kube-proxy firewall-ips {{ {svc.cluster_ip} . tcp . 80 : goto {fw} }}\n"
    ))  # fmt: skip
    for dst, chain in ((f"{svc.cluster_ip}:80", fw), ("10.100.9.9:80", "cluster-ips-check")):  # unallocated
        traced, said = _kpdiag_trace(lab, "--dst", dst)
        whole, _ = _kpdiag_trace(lab, "--dst", dst, "--all-rules")
        assert "not possible" not in said and traced["read"]["destination"] == f"{dst}/tcp", said
        assert {p["verdict"] for p in traced["paths"]} == {"drop"}, traced
        assert chain in traced["read"]["chains"][NFT]["ip kube-proxy"], traced["read"]
        assert _strip_sources({k: v for k, v in traced.items() if k != "read"}) == _strip_sources(whole), dst

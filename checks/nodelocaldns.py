"""NodeLocal DNSCache (node-cache): its rules outliving the cache. node-cache adds NOTRACK rules in raw and ACCEPT rules
in filter for its listen addresses (169.254.20.10, and in iptables mode the kube-dns ClusterIP too) and a dummy
interface holding them; killed without its teardown (OOMKilled, SIGKILL, a crash loop, the DaemonSet deleted) it
leaves them behind, and every DNS lookup on the node fails."""

from __future__ import annotations

import ipaddress
import re
from typing import Optional

from kpdiag.checkapi import Skip, check
from kpdiag.fixcmd import command, note
from kpdiag.model import Evidence
from kpdiag.bundle import sources
from kpdiag.state.typed_node import Addresses, Processes, Routes
from kpdiag.state.typed_proxy import KubeProxyRules

from .shapes import links

LINK_LOCAL = "169.254.20.10"  # node-cache's default listen address
INTERFACE = "nodelocaldns"  # node-cache's default -interfacename
PROCESS = "node-cache"
_DST = re.compile(r"(?:^|\s)-d (\S+?)(?:/32)?(?:\s|$)")
_DPORT = re.compile(r"--dport (\d+)")


def _notrack_rules(rs) -> list:
    """node-cache's raw NOTRACK rules for DNS (its comment, or NOTRACK/CT --notrack to 169.254.20.10:53)."""
    out = []
    for chain in ("PREROUTING", "OUTPUT"):
        c = rs.chain("raw", chain)
        for rule in c.rules if c is not None else []:
            text = rule.text
            untracked = "NOTRACK" in text or "--notrack" in text
            if not untracked:
                continue
            if "NodeLocal DNS Cache" in text or (f"-d {LINK_LOCAL}" in text and "--dport 53" in text):
                out.append(rule)
    return out


def _listen_ips(rules) -> list[str]:
    ips = []
    for rule in rules:
        m, p = _DST.search(rule.text), _DPORT.search(rule.text)
        if m and p and p.group(1) == "53" and m.group(1) not in ips:
            try:
                ipaddress.ip_address(m.group(1))
            except ValueError:
                continue
            ips.append(m.group(1))
    return ips


def _fix() -> tuple:
    """Bring node-cache back on this node; or, only where NodeLocal DNSCache was removed on purpose, tear down what it
    left."""
    teardown = [
        command(f"iptables-save -t raw | grep -n -e 'NodeLocal DNS Cache' -e '{LINK_LOCAL}'   # the leftovers"),
        note(
            "only if NodeLocal DNSCache was removed on purpose: delete each rule listed (iptables -t raw -D PREROUTING "
            "<rule>, iptables -t raw -D OUTPUT <rule>, iptables -D INPUT/OUTPUT <the 'allow DNS traffic' rules>) and "
            f"ip link del {INTERFACE}, and point kubelet's clusterDNS back at the kube-dns ClusterIP"
        ),
    ]
    bring_back = [
        command(
            "kubectl -n kube-system get pods -l k8s-app=node-local-dns -o wide   # the pod on this node: CrashLoopBackOff? OOMKilled?"
        ),
        command(
            "kubectl -n kube-system describe pod -l k8s-app=node-local-dns | grep -A3 'Last State'   # why it died; "
            "raise its memory limit if OOMKilled"
        ),
        command(
            "kubectl -n kube-system delete pod <node-local-dns pod on this node>   # it re-creates its interface and rules"
        ),
    ]
    return tuple(bring_back + teardown)


def _via(routes: Optional[Routes], ip: str) -> str:
    """ " (route DST via GW dev DEV)": where the node's routes send a query to ``ip`` ("" when not known)."""
    if routes is None or not routes.routing.has_routes:
        return ""
    from kpdiag.parse.addr import parse_ip

    r = routes.routing.lookup(*parse_ip(ip))
    if r is None or r.type != "unicast":
        return ""
    return f" (route {r.dst}{' via ' + r.gateway if r.gateway else ''}{' dev ' + r.dev if r.dev else ''})"


@check(
    "KP140",
    "nodelocaldns-down",
    "NodeLocal DNSCache is gone, its rules are left behind",
    "error",
    symptom="Every DNS lookup from every pod on one node fails or times out (nslookup kubernetes.default: 'connection "
    "timed out; no servers could be reached'), while pods on other nodes resolve fine; CoreDNS itself is healthy.",
    why="""
        NodeLocal DNSCache's node-cache listens on 169.254.20.10 (and, in iptables mode, on the kube-dns ClusterIP,
        which it binds on its dummy interface nodelocaldns) and adds raw-table NOTRACK rules for DNS to those
        addresses plus filter ACCEPT rules. NOTRACK takes the packets out of connection tracking, and untracked
        packets skip the nat table — so kube-proxy's DNAT of the kube-dns ClusterIP no longer applies on this node.
        node-cache removes all of it when it exits cleanly; killed (OOMKilled, SIGKILL, evicted, its DaemonSet
        deleted) it leaves the rules behind. Then a query to the ClusterIP is neither DNATed to CoreDNS nor answered
        locally: with the dummy interface gone it leaves by the default route and times out; with the interface
        still there nothing listens and the kernel refuses it. Either way every lookup from this node's pods fails.
    """,
    fix="Bring node-cache back on this node (kubectl -n kube-system get pods -l k8s-app=node-local-dns -o wide; delete "
    "the failing pod, raise its memory limit if it was OOMKilled) — or, if NodeLocal DNSCache was removed on purpose, "
    "delete its leftover NOTRACK/ACCEPT rules and the nodelocaldns interface.",
)
def nodelocaldns_down(
    new,
    rules: KubeProxyRules,
    addresses: Addresses,
    routes: Optional[Routes] = None,
    processes: Optional[Processes] = None,
):
    rs = rules.ruleset
    rules = _notrack_rules(rs)
    if not rules:
        return  # no NodeLocal DNSCache on this node
    ips = _listen_ips(rules) or [LINK_LOCAL]
    ifaces = {link["ifname"]: link for link in links(addresses.links)}
    bound = {
        a.get("local"): name
        for name, link in ifaces.items()
        for a in link.get("addr_info") or []
        if isinstance(a, dict) and a.get("local") in ips
    }
    running = None if processes is None else PROCESS in processes.pids
    if running:
        return  # node-cache runs: its rules are its own
    rule_ev = [Evidence(rs.source, r.text, r.lineno) for r in rules[:3]]
    addr_src = addresses.source
    cluster_ips = [ip for ip in ips if ip != LINK_LOCAL]
    missing = [ip for ip in ips if ip not in bound]
    fix = _fix()
    if missing:
        via = _via(routes, missing[0])
        what = (
            f"queries to {', '.join(missing)} are untracked, so kube-proxy's DNAT of the kube-dns ClusterIP does not apply, "
            f"and no interface holds {'those addresses' if len(missing) > 1 else 'that address'}: they leave the node{via} "
            "and every DNS lookup from this node's pods times out"
        )
        yield new(
            f"NodeLocal DNSCache's NOTRACK rules for {', '.join(ips)}:53 are still in the raw table, but its interface "
            f"{INTERFACE} is gone{' and node-cache is not running' if running is False else ''}: {what}",
            fix=fix,
            evidence=rule_ev
            + [
                Evidence(
                    addr_src, f"no interface holds {ip}" + (f" (no {INTERFACE})" if INTERFACE not in ifaces else "")
                )
                for ip in missing[:2]
            ]
            + ([Evidence(processes.source, f"no {PROCESS} process")] if running is False else []),
            subject="node",
            data={"listen": ips, "unbound": missing, "node_cache_running": running, "cluster_ips": cluster_ips},
        )
        return
    if running is None:
        raise Skip(
            f"NodeLocal DNSCache's rules and its addresses are here; whether node-cache runs is not known "
            f"({sources.PROCESSES} was not collected)"
        )
    yield new(
        f"NodeLocal DNSCache's rules and its addresses ({', '.join(f'{ip} on {bound[ip]}' for ip in ips)}) are on this node, "
        f"but no node-cache process runs: DNS queries to {', '.join(ips)}:53 are delivered to the node and nothing "
        "answers them (refused) — every lookup from this node's pods fails",
        fix=fix,
        evidence=rule_ev
        + [Evidence(addr_src, f"{bound[ip]}: {ip}") for ip in ips[:2]]
        + [Evidence(processes.source, f"no {PROCESS} process")],
        subject="node",
        data={"listen": ips, "unbound": [], "node_cache_running": False, "cluster_ips": cluster_ips},
    )

"""hostPort through the CNI portmap plugin: its DNAT is rules in the host's netfilter tables (iptables
CNI-HOSTPORT-DNAT → CNI-DN-<id> chains, or its nftables table cni_hostport), written once when the pod is set up.
KP530: a pod here has a hostPort and its DNAT is gone (a firewalld reload or a restored ruleset flushed it); KP528:
UDP flows to a hostPort whose conntrack entries still DNAT to a pod that no longer holds it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from kpdiag import evidence as ev
from kpdiag.checkapi import Skip, check
from kpdiag.fixcmd import command, note
from kpdiag.model import Evidence
from kpdiag.state.typed_api import NodeObject, Pods
from kpdiag.state.typed_node import Addresses, Cni, ConntrackEntries
from kpdiag.state.typed_proxy import KubeProxyRules, Nft

from .ct_udp import node_addresses, udp_entries

TOP = "CNI-HOSTPORT-DNAT"


@dataclass(frozen=True)
class HostPort:
    namespace: str
    pod: str
    ip: str  # the pod's IP (of the host port's family)
    container: str
    host_port: int
    container_port: int
    protocol: str  # tcp, udp, sctp
    host_ip: str | None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.pod}"

    def spec(self) -> str:
        return (
            f"{self.key} (pod IP {self.ip}): containers[{self.container}].ports: hostPort: {self.host_port}, "
            f"containerPort: {self.container_port}, protocol: {self.protocol.upper()}"
            + (f", hostIP: {self.host_ip}" if self.host_ip else "")
        )


def _pod_ips(pod: dict, node: str | None) -> list | None:
    """The addresses of ``pod`` when it runs on ``node`` (None: any) in the pod network, else None."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    if node is not None and spec.get("nodeName") != node or spec.get("hostNetwork") or meta.get("deletionTimestamp"):
        return None
    if status.get("phase") != "Running" or not isinstance(status.get("podIP"), str):
        return None
    return [i.get("ip") for i in status.get("podIPs") or () if isinstance(i, dict)] or [status["podIP"]]


def _container_host_ports(meta: dict, c, ips: list) -> list[HostPort]:
    """The hostPorts one container declares, one per pod address of the port's family."""
    out = []
    for p in c.get("ports") or () if isinstance(c, dict) else ():
        hp = p.get("hostPort") if isinstance(p, dict) else None
        if not isinstance(hp, int) or hp <= 0 or not isinstance(p.get("containerPort"), int):
            continue
        host_ip = p.get("hostIP") if p.get("hostIP") not in (None, "", "0.0.0.0", "::") else None
        for ip in ips:
            if isinstance(ip, str) and (":" in ip) == (":" in (host_ip or ip)):
                out.append(
                    HostPort(
                        meta.get("namespace") or "default",
                        str(meta.get("name")),
                        ip,
                        str(c.get("name")),
                        hp,
                        p["containerPort"],
                        str(p.get("protocol") or "TCP").lower(),
                        host_ip,
                    )
                )
    return out


def host_ports(pods: Pods, node: str | None) -> list[HostPort]:
    """The hostPorts of the running pods on ``node`` (None: on any node) whose traffic portmap DNATs (hostNetwork
    pods bind the port themselves: no DNAT)."""
    out = []
    for pod in pods.items:
        ips = _pod_ips(pod, node)
        if ips is None:
            continue
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        for c in spec.get("containers") or ():
            out += _container_host_ports(meta, c, ips)
    return out


def _here(pods: Pods, cni: Cni, node: NodeObject) -> list[HostPort]:
    """The host ports of this node's pods where portmap implements them; [] when no pod has one (the case cannot
    arise); Skip when which pods run here, or whether portmap is what implements hostPort, cannot be told."""
    if not host_ports(pods, None):
        return []
    if not node.name:
        raise Skip("this node's name is not known: which pods run here cannot be told")
    mine = host_ports(pods, node.name)
    why = cni.model.hostport_not_portmap() if mine else None
    if why:
        raise Skip(why)
    return mine


def _target(hp: HostPort) -> str:
    return f"[{hp.ip}]:{hp.container_port}" if ":" in hp.ip else f"{hp.ip}:{hp.container_port}"


def _iptables_dnat(rules: KubeProxyRules, hp: HostPort):
    """portmap's DNAT rule for ``hp`` in the nat table (any chain) of either iptables backend, and that backend's
    ruleset; (None, iptables-save's) when there is none."""
    to = re.compile(rf"--to-destination {re.escape(_target(hp))}(\s|$)")
    dport = re.compile(rf"--dport {hp.host_port}(\s|$)")
    for which in ("iptables-save", "iptables-nft-save", "iptables-legacy-save"):
        rs = rules.dump(which)
        if rs is None:
            continue
        for name in rs.chain_names("nat"):
            chain = rs.chain("nat", name)  # one of the names it has: never None
            for r in chain.rules if chain is not None else ():
                if r.target == "DNAT" and f"-p {hp.protocol}" in r.text and dport.search(r.text) and to.search(r.text):
                    return r, rs
    return None, rules.ruleset


def _reached(rs, chain: str) -> bool:
    """Whether nat PREROUTING reaches ``chain`` through jumps (a restored ruleset can keep a chain, not its jump)."""
    seen, todo = set(), ["PREROUTING"]
    while todo:
        name = todo.pop()
        if name == chain:
            return True
        if name in seen or rs.chain("nat", name) is None:
            continue
        seen.add(name)
        todo += [r.target for r in rs.chain("nat", name).rules if r.target]
    return False


def _nft_dnat(nft: Nft | None, hp: HostPort) -> str | None:
    """portmap's nftables rule for ``hp`` (table ip/ip6 cni_hostport), as text, or None."""
    rs = nft.ruleset() if nft is not None and "cni_hostport" in nft.text else None
    for chain in rs.chains.values() if rs is not None else ():
        if chain.table != "cni_hostport":
            continue
        for r in chain.rules:
            text = r.text
            if "dnat" in text and re.search(rf"dport {hp.host_port}\b", text) and hp.ip in text:
                return f"{chain.family} {chain.table} {chain.name}: {text}"
    return None


@check(
    "KP530",
    "hostport-dnat-missing",
    "A pod's hostPort has no DNAT on its node (portmap's rules flushed)",
    "error",
    symptom="A pod with hostPort (an ingress controller, a DNS or metrics agent) stops answering on <node>:<port> "
    "after a firewalld reload, an iptables restore or a host firewall change, although the pod is Running and Ready.",
    why="""
        A hostPort is not a socket on the node: the CNI portmap plugin writes a DNAT rule (iptables: a CNI-DN-<id>
        chain jumped to from CNI-HOSTPORT-DNAT in PREROUTING and OUTPUT; or its nftables table cni_hostport) when the
        pod is set up, and never again. Whatever replaces the node's rules afterwards takes it away for good:
        firewalld with its iptables backend flushes every table on start and reload, a saved ruleset restored at boot
        (iptables-restore, netfilter-persistent) holds no pod's rules. kubelet still reports the pod healthy (its
        probes go to the pod IP), but connections to the node's port find nothing there.
    """,
    needs=("whole-rules",),  # a `kpdiag node --service` bundle holds one Service's chains, not portmap's
    fix="Re-run the CNI for the pod (delete it: its controller recreates it), then make the reload stop flushing the "
    "CNI's rules (firewalld's nftables backend, portmap's nftables backend, no blanket iptables-restore).",
)
def hostport_dnat_missing(
    new, pods: Pods, node: NodeObject, cni: Cni, rules: KubeProxyRules, nft: Optional[Nft] = None
):
    for hp in _here(pods, cni, node):
        if ":" in hp.ip:
            continue  # IPv6: portmap's rules are in ip6tables, which this check does not read
        rule, rs = _iptables_dnat(rules, hp)
        if rule is not None and _reached(rs, rule.chain):
            continue
        if rule is None and _nft_dnat(nft, hp) is not None:
            continue
        if rule is None and nft is None:
            raise Skip("the nftables ruleset was not collected: portmap's nftables backend cannot be ruled out")
        top = ev.chain(rs, "nat", TOP)
        what = (
            f"its DNAT rule is in {rule.chain}, which nat PREROUTING no longer reaches"
            if rule is not None
            else f"no DNAT to {_target(hp)} in the nat table"
            + ("" if top is not None else f" (no {TOP} chain at all)")
            + (" nor in a cni_hostport table" if nft is not None else "")
        )
        yield new(
            f"pod {hp.key} has hostPort {hp.host_port}/{hp.protocol.upper()} on this node but {what}: connections "
            f"to the node's port {hp.host_port} never reach the pod",
            fix=(
                command(
                    f"kubectl -n {hp.namespace} delete pod {hp.pod}   # its controller recreates it: the CNI "
                    "(portmap) writes the DNAT again"
                ),
                note(
                    "firewalld flushes the CNI's iptables rules on every reload with its iptables backend: set "
                    "FirewallBackend=nftables in /etc/firewalld/firewalld.conf (it then only changes its own table), "
                    'or give portmap its nftables backend ("backend": "nftables" in the portmap entry of '
                    "/etc/cni/net.d/*.conflist)"
                ),
                note(
                    "a saved ruleset restored over the running one (iptables-restore, netfilter-persistent) drops "
                    "the pods' rules the same way: restore with --noflush, or only the tables you own"
                ),
            ),
            evidence=[pods.evidence(hp.spec())]
            + ([ev.rule(rule)] if rule is not None else [top or Evidence(rs.source, f"nat: no chain {TOP}")]),
            subject=hp.key,
            data={
                "pod": hp.key,
                "pod_ip": hp.ip,
                "host_port": hp.host_port,
                "container_port": hp.container_port,
                "protocol": hp.protocol,
                "dnat_rule": rule.text if rule is not None else None,
            },
        )


@check(
    "KP528",
    "stale-hostport-udp-conntrack",
    "UDP conntrack entries to a hostPort still go to a pod that no longer holds it",
    "warning",
    symptom="After a pod with a UDP hostPort (a DNS or syslog agent, a game server) is replaced, clients that keep "
    "sending to <node>:<port> time out; new clients work.",
    why="""
        A UDP client that keeps sending from one port keeps its conntrack entry, and the entry keeps the DNAT it got
        for its first packet — to the pod that held the hostPort then. The portmap plugin deletes the UDP entries of
        a host port when it sets up the pod that takes the port; when that did not happen (an older plugin, its
        cleanup failed, the port moved by another path) the flow stays on the gone pod until the client stops
        sending for the UDP timeout.
    """,
    fix="Delete the stale entries (conntrack -D -p udp --orig-port-dst <hostPort> --reply-src <old pod IP>).",
)
def stale_hostport_udp(
    new,
    pods: Pods,
    node: NodeObject,
    cni: Cni,
    entries: ConntrackEntries,
    addresses: Optional[Addresses] = None,
):
    local = node_addresses(addresses)
    owners: dict[int, list[HostPort]] = {}
    for hp in _here(pods, cni, node):
        if hp.protocol == "udp" and ":" not in hp.ip:  # conntrack -L lists IPv4 entries
            owners.setdefault(hp.host_port, []).append(hp)
    if not owners:
        return
    if addresses is None:
        raise Skip("the node's addresses (ip -j addr) were not collected: entries to its host ports cannot be told")
    for port, holders in sorted(owners.items()):
        ips = {h.ip for h in holders}
        stale = [
            e
            for e in udp_entries(entries.text or "")
            if e.dport == port
            and e.dst in local
            and e.translated
            and e.reply_src not in ips
            and e.reply_src != e.dst
            and (e.reply_src, e.reply_sport) in {(e.reply_src, h.container_port) for h in holders}
        ]
        if not stale:
            continue
        gone = sorted({e.reply_src for e in stale})
        holder = holders[0]
        n = len(stale)
        yield new(
            f"{n} UDP conntrack entr{'y' if n == 1 else 'ies'} to hostPort {port} still go{'es' if n == 1 else ''} to "
            f"{', '.join(gone)}; the port is {holder.key}'s ({holder.ip}) now: those clients are black-holed",
            fix=tuple(command(f"conntrack -D -p udp --orig-port-dst {port} --reply-src {g}") for g in gone),
            evidence=[Evidence(entries.source, e.text, e.line) for e in stale[:3]] + [pods.evidence(holder.spec())],
            subject=f"{holder.key}:{port}",
            data={"host_port": port, "pod": holder.key, "pod_ip": holder.ip, "stale_endpoints": gone, "entries": n},
        )

"""What `kpdiag trace` needs (rules, addresses, routes, ipsets), loaded from files, a bundle or this node."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kpdiag.bundle.store import Bundle, Problem
from ..errors import InputError
from kpdiag.bundle import sources

if TYPE_CHECKING:
    from ipaddress import IPv4Network, IPv6Network

    from ..collect.iptables_focused import Destination
    from kpdiag.state.node import NodeState
    from kpdiag.trace.model import TraceResult
    from kpdiag.trace.netfilter import IptablesTracer
    from kpdiag.trace.walker import PacketWalker


FOCUS_FALLBACK = "focused read of the rules"  # in kpdiag/collect/dest_rules.py's fallback reason


@dataclass
class TraceSetup:
    tracer: PacketWalker
    mode: str
    problems: list[Problem] = field(default_factory=list)
    state: NodeState | None = (
        None  # the NodeState of a bundle or a live node (for notes: the service CIDR, the API objects)
    )
    read: dict[str, Any] | None = None  # a live trace's focused read: what it holds (kpdiag/collect/dest_rules.py)
    live: bool = False  # read from this node now: no file holds the rules
    notes: tuple[str, ...] = ()  # what the trace's result says of its inputs (which iptables backend it walked)


def label_live(result: TraceResult, setup: TraceSetup) -> TraceResult:
    """A live trace's rules came from no file: each source named by the command that read it, "on this node, live"
    (``iptables-save on this node, live``), not by the bundle path it would have in a bundle."""
    from dataclasses import replace

    if not setup.live:
        return result

    def label(path: str) -> str:
        declared = sources.declared(path.split("#", 1)[0])
        command = declared.collected_by.split(" (", 1)[0] if declared is not None and declared.collected_by else path
        return f"{command} on this node, live"

    return replace(result, sources=tuple(dict.fromkeys(label(s) for s in result.sources)))


def read_summary(read: dict[str, Any]) -> str:
    """One line on what a live trace's focused read held: the chains, and (nftables) the map elements left out."""
    chains = sum(len(c) for t in read["chains"].values() for c in t.values())
    left = sum(n for t in (read.get("elements_left_out") or {}).values() for s in t.values() for n in s.values())
    servers = read.get("virtual_servers")
    vs = f" and the {len(servers)} virtual servers" if servers is not None else ""
    out = f"read only the {chains} chains{vs} a packet to {read['destination']} can meet"
    if left:
        out += f" and the set and map elements whose key it can match ({left} elements left out)"
    return out + " (--all-rules: every rule)"


def split_dst(text: str) -> tuple[str, int | None]:
    """--dst as typed: IP, IPv4:PORT, [IPv6]:PORT or a bare IPv6 address → (address, port or None)."""
    import ipaddress

    text = text.strip()
    port = None
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"--dst {text!r}: write an IPv6 address with a port as [ADDR]:PORT")
        port_text = rest[1:] if rest else None
    elif text.count(":") == 1:  # IPv4:PORT (an IPv6 address has at least two colons)
        host, _, port_text = text.partition(":")
    else:
        host, port_text = text, None
    if port_text is not None:
        if not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) <= 65535:
            raise ValueError(f"--dst {text!r}: {port_text!r} is not a port number")
        port = int(port_text)
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"--dst {text!r}: {host!r} is not an IP address (IP, IP:PORT or [IPv6]:PORT)") from None
    if addr.version == 4 and text.startswith("["):
        raise ValueError(f"--dst {text!r}: brackets are for IPv6 addresses")
    return str(addr), port


def _api_service_cidrs(state: NodeState | None) -> tuple[list[IPv4Network | IPv6Network], str] | None:
    """The service CIDR(s) from kube-apiserver's --service-cluster-ip-range in the bundle's pods (a kubeadm static pod)."""
    from kpdiag.state.cluster import apiserver_service_cidrs

    doc = state.bundle.read_json(sources.PODS) if state is not None else None
    nets = apiserver_service_cidrs(doc.get("items") if isinstance(doc, dict) else None)
    return (nets, "kube-apiserver's --service-cluster-ip-range") if nets else None


def explain_unmatched(result: TraceResult, setup: TraceSetup) -> TraceResult:
    """The setup's notes (which iptables backend was walked) added to the result; and in iptables mode, where
    kube-proxy has no rule for an address no Service has (the packet passes untranslated and is routed like any
    other; nftables mode drops or rejects it in cluster-ips-check and says so itself), a note when the destination
    is — or could be — in the service CIDR: no Service has it, or its Service lacks the port."""
    import ipaddress
    from dataclasses import replace

    from kpdiag.dataplane import get

    if setup.notes:
        result = replace(result, notes=tuple(result.notes) + tuple(setup.notes))
    if get(setup.mode).cluster_ips_stay_on_node or any(p.dnat for p in result.paths):
        return result
    from kpdiag.state.kube_rules import programmed_ports
    from kpdiag.trace.netfilter import IptablesTracer

    if not isinstance(setup.tracer, IptablesTracer):
        return result

    pk = result.packet
    dst = ipaddress.ip_address(pk.dst)
    try:
        ports = [p for p in programmed_ports(setup.tracer.rs).values() if p.cluster_ip]
    except Exception:  # a note must never break the trace
        return result
    same = [p for p in ports if p.cluster_ip == str(dst)]
    note = None
    if same:
        defined = sorted({f"{(p.proto or 'tcp').lower()}/{p.port}" for p in same})
        if f"{pk.proto.lower()}/{pk.dport}" in defined:  # kube-proxy has a rule for it (e.g. REJECT: no endpoints)
            return result
        names = sorted({p.name.rsplit(":", 1)[0] for p in same})
        note = (
            f"{dst} is the ClusterIP of {', '.join(names)}, but its Service defines no {pk.proto}/{pk.dport} (only "
            f"{', '.join(defined)}): kube-proxy does not translate the packet, the node routes it like any other address"
        )
    else:
        cidrs = _api_service_cidrs(setup.state)
        if cidrs is not None:
            nets, source = cidrs
            inside = [n for n in nets if n.version == dst.version and dst in n]
            if inside:
                note = (
                    f"no Service has {dst} (in the service CIDR {inside[0]}, from {source}): kube-proxy has no rule for it, "
                    "so the packet is not translated and the node routes it like any other address"
                )
        else:
            ips = sorted(
                {
                    ipaddress.ip_address(p.cluster_ip)
                    for p in ports
                    if p.cluster_ip and (":" in p.cluster_ip) == (dst.version == 6)
                },
                key=int,
            )
            if ips:
                limit = 12 if dst.version == 4 else 108  # the API server allows no wider service CIDR
                bits = dst.max_prefixlen
                lo, hi = min(int(ips[0]), int(dst)), max(int(ips[-1]), int(dst))
                if bits - (lo ^ hi).bit_length() >= limit:
                    span = ipaddress.ip_network((int(ips[0]) >> (bits - limit) << (bits - limit), limit))
                    note = (
                        f"no Service has {dst}: kube-proxy has no rule for it, though it may be in the service CIDR (it is in "
                        f"{span} with this node's ClusterIPs {', '.join(str(i) for i in ips[:3])}{' …' if len(ips) > 3 else ''}): "
                        "the packet is not translated; the node routes it like any other address"
                    )
    return result if note is None else replace(result, notes=tuple(result.notes) + (note,))


def live_state(
    host_root: str | None = None,
    progress: Callable[[str], None] | None = None,
    dest: Destination | None = None,
) -> tuple[NodeState, dict[str, Any] | None]:
    """This node's state as a trace needs it, collected read-only with kpdiag's node collector: kernel, sysctls,
    addresses and routes, iptables/nftables rules, IPVS, ipsets and kube-proxy's /proxyMode (no conntrack, no logs).
    (NodeState, what the focused read holds or None). ``dest`` (a kpdiag.collect.dest_rules.Destination): only the
    rules a packet to it can meet are read (the whole rules when that is not possible: a problem of iptables-save
    says why)."""
    import json
    import socket

    from ..collect.node import NodeCollector
    from kpdiag.state.node import NodeState

    rules = None
    if dest is not None:
        from ..collect.dest_rules import focused_on

        rules = focused_on(dest)

    steps = ("kernel", "sysctls", "links", "iptables", "nft", "ipvs", "kube_proxy_http")
    wanted = [
        s for s in sources.node_sources() if isinstance(s.collect, sources.Method) and s.collect.names[0] in steps
    ]
    also = [sources.MODULES_BUILTIN, sources.IPSET, sources.XT_RECENT]  # XT_RECENT: session affinity state
    c = NodeCollector(host_root=host_root, progress=progress, only=wanted + also)
    c.collect(rules=rules)
    files = dict(c.out.files)
    manifest = c.out.manifest(socket.gethostname())
    files["kpdiag.json"] = json.dumps(manifest).encode()
    # c.partial is not the manifest's "partial": that one names a Service whose findings are judged
    return NodeState(Bundle.from_files(manifest["node"] or "node", files)), c.partial or None


READ_DEADLINE = 60.0  # seconds for a pipe (`--rules <(ssh node iptables-save)`) to reach its end


def _read_file(path: str) -> bytes:
    """A file given on the command line, read as a bundle's files are: a regular file or a pipe, at most
    MAX_FILE_BYTES (a bigger one is one line, not gigabytes), a pipe until its end within READ_DEADLINE; a device
    (/dev/zero) or socket is refused, a FIFO nobody writes to is empty."""
    import os
    import stat
    import time

    from kpdiag.bundle import safeio
    from kpdiag.bundle.store import MAX_FILE_BYTES

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO without a writer: no wait to open
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except PermissionError:
        raise InputError(path, "permission denied") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise InputError(path, "is a directory, not a file")
        if stat.S_ISREG(mode):
            return safeio.read_capped(fd, MAX_FILE_BYTES, path)
        if not stat.S_ISFIFO(mode):
            raise InputError(path, f"is {safeio.file_kind(mode)}, not a regular file: not read")
        data = safeio.read_until(fd, MAX_FILE_BYTES, time.monotonic() + READ_DEADLINE)
        if len(data) > MAX_FILE_BYTES:
            raise safeio.TooLarge(path, len(data), MAX_FILE_BYTES)
        return data
    except TimeoutError:
        raise InputError(path, f"no end of input after {READ_DEADLINE:.0f} s: not read") from None
    except safeio.TooLarge as exc:
        raise InputError(path, f"{exc.strerror}: not read") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _required(state: NodeState, value: object, bundle: str, rel: str, what: str) -> object:
    """The parsed source, or an InputError that says why it is missing (the file's own problems, first)."""
    if value is None:
        why = "; ".join(str(p) for p in state.problems) or f"{bundle} has no {rel}"
        raise InputError(bundle, f"no {what} to trace ({why})")
    return value


def _saved_family(data: bytes) -> int | None:
    """4 for iptables-save output, 6 for ip6tables-save (from its '# Generated by' line), None when it does not say."""
    import re

    m = re.search(rb"^# Generated by (ip6?)tables", data[:4096], re.M)
    return None if m is None else (6 if m.group(1) == b"ip6" else 4)


def _with_nft_tables(tracer: IptablesTracer, state: NodeState) -> None:
    """iptables and IPVS mode: the node's other nftables tables (a host firewall such as firewalld's, a leftover
    kube-proxy table) run at the same hooks; parse the ruleset only when it has base chains of its own."""
    from ..parse.nft import hooked_tables
    from ..trace.netfilter import IPTABLES_NFT_TABLES

    own = {(f, t) for f in ("ip", "ip6") for t in IPTABLES_NFT_TABLES}
    if hooked_tables(state.nft_text or "") - own:
        tracer.nft = state.nft()


def setup_trace(
    rules: str | None = None,
    bundle: str | None = None,
    local_ips: Iterable[str] = (),
    ipset_file: str | None = None,
    nft: str | None = None,
    mode: str = "auto",
    family: int = 4,
    live: bool = False,
    host_root: str | None = None,
    progress: Callable[[str], None] | None = None,
    dest: Destination | None = None,
) -> TraceSetup:
    """Build a tracer from ``--rules FILE`` (iptables-save), ``--nft FILE`` (nft -j list ruleset), ``--bundle``, or
    ``live``: this node, read now; for packets of IP version ``family`` (iptables keeps IPv6 rules apart). ``dest``
    (live only): read only the rules a packet to that destination can meet (kpdiag/collect/dest_rules.py)."""
    from ..trace.routing import RoutingTable

    if nft:
        from ..parse.nft import parse_nft_json
        from ..trace.nftables import NftTracer

        nft_rules = parse_nft_json(_read_file(nft), nft)
        return TraceSetup(NftTracer(nft_rules, RoutingTable.from_local_ips(local_ips)), "nftables", [])
    if rules:
        return _setup_from_rules(rules, family, local_ips, ipset_file)
    if bundle or live:
        return _setup_from_state(bundle, live, host_root, progress, dest, mode, family, local_ips)
    raise InputError("kpdiag trace", "give --rules FILE or --bundle DIR")


def _setup_from_rules(rules: str, family: int, local_ips: Iterable[str], ipset_file: str | None) -> TraceSetup:
    """A tracer over ``--rules FILE`` (iptables-save output of the packet's family) and ``--ipsets FILE``."""
    from ..parse.iptables import parse_iptables_save
    from ..trace.netfilter import IptablesTracer
    from ..trace.routing import RoutingTable

    problems: list[Problem] = []
    ipsets = None
    data = _read_file(rules)
    saved = _saved_family(data)
    if saved is not None and saved != family:
        need = "ip6tables-save" if family == 6 else "iptables-save"
        raise InputError(
            rules,
            f"{'ip6tables' if saved == 6 else 'iptables'}-save output holds IPv{saved} rules only; "
            f"an IPv{family} packet needs {need} output",
        )
    ruleset = parse_iptables_save(data, rules)
    routing = RoutingTable.from_local_ips(local_ips)
    if ipset_file:
        from ..parse.ipset import parse_ipset_save

        data = _read_file(ipset_file)
        try:
            ipsets = parse_ipset_save(data.decode("utf-8", "replace"), ipset_file)
        except InputError as exc:
            problems.append(Problem(f"{exc.source}:{exc.line}" if exc.line else exc.source, exc.message))
    return TraceSetup(IptablesTracer(ruleset, routing, ipsets), "iptables", problems)


def _setup_from_state(
    bundle: str | None,
    live: bool,
    host_root: str | None,
    progress: Callable[[str], None] | None,
    dest: Destination | None,
    mode: str,
    family: int,
    local_ips: Iterable[str],
) -> TraceSetup:
    """A tracer over a bundle or this node (``live``), in the mode kube-proxy runs (``mode`` "auto") or the one
    asked, over the rules of the iptables backend that acts."""
    from kpdiag.state.node import NodeState
    from kpdiag.dataplane import get

    from ..trace.netfilter import IptablesTracer

    read = None
    if live:
        state, read = live_state(host_root, progress, dest)
    else:
        assert bundle is not None  # live or a bundle
        state = NodeState(Bundle.open(bundle))
    bundle = bundle or f"this node ({state.node_name or 'live'})"
    dp = state.dataplane if mode == "auto" else get(mode)  # auto: the mode kube-proxy runs in
    dp = dp if dp.has_own_tracer else get("iptables")  # a mode without a tracer: its iptables rules
    for ip in local_ips:
        from ..parse.addr import parse_ip

        state.routing.local_ips.add(parse_ip(ip))
    chosen = None
    if family == 4:  # which iptables backend's rules act (kpdiag/trace/backends.py); IPv6: ip6tables-save's
        from ..trace.backends import choose

        chosen = choose(state, bundle)
    backend = chosen.rules if chosen is not None and chosen.note else None
    needed, rel, what = dp.trace_rules(state, family)
    if backend is not None and dp.traced_with_iptables:
        needed = backend
    _required(state, needed, bundle, rel, what)
    missing = dp.trace_missing(state)
    if missing:
        raise InputError(bundle, missing)
    # parses ipsets too: their problems are collected after it
    tracer = dp.tracer(state, family, backend)
    if isinstance(tracer, IptablesTracer):  # an iptables walk
        if dp.traced_with_iptables and state.nft_text:
            _with_nft_tables(tracer, state)
        tracer.recent = state.xt_recent  # kube-proxy's session affinity state, when recorded
    problems = list(state.problems)
    if live:  # what a live trace did not need to read is no warning of it
        used = dp.trace_sources + (sources.XT_RECENT,) + ((chosen.source,) if chosen and chosen.note else ())
        problems = [p for p in problems if any(n in p.source for n in used) or FOCUS_FALLBACK in p.error]
    notes = (chosen.note,) if chosen is not None and chosen.note else ()
    assert tracer is not None  # _required: its rules are there
    return TraceSetup(tracer, dp.name, problems, state, read, live=live, notes=notes)

"""`kpdiag trace`: one packet through the node's rules, from files, a bundle or this node (kpdiag/commands/trace.py)."""

from __future__ import annotations

import click

from kpdiag import exitcodes
from kpdiag.dataplane import kube_proxy_modes
from kpdiag.cli.options import OUTPUTS, VERBOSE_HELP, _fail, _progress, _say, _yaml


@click.command()
@click.option("--rules", "rules", type=click.Path(dir_okay=False), help="iptables-save output to trace through.")
@click.option("--bundle", "bundle", type=click.Path(), help="A kpdiag bundle (directory or .tar.gz).")
@click.option(
    "--nft",
    "nft_file",
    type=click.Path(dir_okay=False),
    help="'nft -j list ruleset' output to trace through (nftables mode).",
)
@click.option(
    "--mode",
    type=click.Choice(["auto", *(d.name for d in kube_proxy_modes() if d.has_own_tracer)]),
    default="auto",
    show_default=True,
    help="With --bundle or live: which rules to trace (auto: the mode kube-proxy runs in).",
)
@click.option("--ipsets", "ipset_file", type=click.Path(dir_okay=False), help="'ipset save' output (with --rules).")
@click.option("--src", help="Source IP (default: a node address with --from node).")
@click.option(
    "--dst", required=True, help="Destination: IP, IP:PORT or [IPv6]:PORT (a ClusterIP, node IP, external or LB IP)."
)
@click.option("--proto", type=click.Choice(["tcp", "udp", "sctp", "icmp"]), default="tcp", show_default=True)
@click.option("--dport", type=int, help="Destination port (not for icmp; or give it in --dst IP:PORT).")
@click.option("--sport", type=int, default=40000, show_default=True, help="Source port.")
@click.option(
    "--from",
    "origin",
    type=click.Choice(["external", "pod", "node"]),
    default="external",
    show_default=True,
    help="Where the packet comes from: another host / a pod (PREROUTING) or the node itself (OUTPUT).",
)
@click.option(
    "--local-ip", "local_ips", multiple=True, help="The node's own addresses (repeatable) when no bundle gives them."
)
@click.option("--iif", help="Input interface of the packet (for rules with -i).")
@click.option(
    "--host-root",
    type=click.Path(),
    default=None,
    help="Live (no --rules/--nft/--bundle): where the host's root is mounted.",
)
@click.option(
    "--all-rules",
    is_flag=True,
    help="Live: read the whole ruleset (iptables-save, nft list ruleset) instead of only what this packet can meet.",
)
@click.option(
    "--kernel",
    is_flag=True,
    help="Live, --from node, TCP/UDP: also send the packet as a probe and show the kernel's own trace of it beside "
    "the simulated path (AGREE or the first rule where they part). Changes the node for about a second: a table of "
    "kpdiag's (deleted by the kernel when kpdiag exits, even on SIGKILL), a listener, the probe's connection.",
)
@click.option("-o", "--output", type=click.Choice(OUTPUTS), default="text", show_default=True)
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help=VERBOSE_HELP + " Here: every rule's text in full, not only the one that decided.",
)
def trace(
    rules,
    bundle,
    nft_file,
    mode,
    ipset_file,
    src,
    dst,
    proto,
    dport,
    sport,
    origin,
    local_ips,
    iif,
    host_root,
    all_rules,
    kernel,
    output,
    verbose,
):
    """Trace one packet through the node's rules: every rule it hits, each endpoint with its probability.

    Without --rules, --nft or --bundle it reads this node's rules, addresses, routes and sysctls (read-only): in
    iptables and nftables mode only the chains (and nftables map elements) a packet to --dst can meet, unless
    --all-rules (the whole dump when that is not possible, saying why).
    Exit code: 0 delivered on every path, 4 dropped on some path, 5 rejected (none dropped); 2 usage, 3 unreadable
    or not traced to the end (the trace's work budget; the notes say why). --kernel is the one option of kpdiag
    that changes the node (docs/privileges.md).
    """
    from kpdiag.errors import InputError
    from kpdiag.commands.trace import read_summary, setup_trace

    dst, dport, family, live = _judge_arguments(
        rules, bundle, nft_file, dst, dport, proto, origin, src, sport, iif, kernel, all_rules
    )
    try:
        setup = setup_trace(
            rules=rules,
            bundle=bundle,
            local_ips=local_ips,
            ipset_file=ipset_file,
            nft=nft_file,
            mode=mode,
            family=family,
            live=live,
            host_root=host_root,
            progress=_progress,
            dest=_trace_focus(dst, dport, proto, mode) if live and not all_rules else None,
        )
    except InputError as exc:
        raise _fail(str(exc), exitcodes.NO_DIAGNOSIS) from None
    if setup.read:
        _say(read_summary(setup.read))
    if src is None:
        src = _first_local(setup, local_ips, family, dst)
        if src is None:
            raise _fail(
                f"--from node: no IPv{family} address of the node is known; give --src or --local-ip", exitcodes.USAGE
            )
    result = _traced(setup, _packet(src, dst, proto, dport, sport, origin, iif), kernel)
    click.echo(_render(result, output, verbose), nl=False)
    raise click.exceptions.Exit(exitcodes.for_trace(result.verdicts(), result.complete))


def _judge_arguments(rules, bundle, nft_file, dst, dport, proto, origin, src, sport, iif, kernel, all_rules):
    """Every argument of `kpdiag trace` judged before anything is read (a typo costs no collection of the live node):
    the destination and port (--dst IP:PORT or --dport), the address family and whether the trace is live."""
    from kpdiag.commands.trace import split_dst

    if sum(bool(x) for x in (rules, bundle, nft_file)) > 1:
        raise _fail(
            "give at most one of --rules FILE, --nft FILE or --bundle DIR (none: trace live on this node)",
            exitcodes.USAGE,
        )
    try:
        dst, dst_port = split_dst(dst)
    except ValueError as exc:
        raise _fail(str(exc), exitcodes.USAGE) from None
    if dst_port is not None:
        if dport is not None and dport != dst_port:
            raise _fail(f"--dst gives port {dst_port} and --dport {dport}: give one", exitcodes.USAGE)
        dport = dst_port
    if proto == "icmp" and dport is not None:
        raise _fail("an ICMP packet has no port: leave out --dport and the :PORT of --dst", exitcodes.USAGE)
    family = 6 if ":" in dst else 4
    live = not (rules or bundle or nft_file)
    if kernel and (not live or origin != "node" or proto not in ("tcp", "udp")):
        raise _fail(
            "--kernel is for a live trace of a TCP or UDP packet --from node (the probe kpdiag sends)", exitcodes.USAGE
        )
    if all_rules and not live:
        raise _fail("--all-rules is for a live trace (--rules, --nft and --bundle are read whole)", exitcodes.USAGE)
    if src is None and origin != "node":
        raise _fail("--src is needed unless --from node", exitcodes.USAGE)
    # the packet as given (a stand-in source of its family when --from node picks it later)
    _packet(src or ("::1" if family == 6 else "127.0.0.1"), dst, proto, dport, sport, origin, iif)
    return dst, dport, family, live


def _packet(src, dst, proto, dport, sport, origin, iif):
    """The packet to trace, or a usage error that says what is wrong with it."""
    from kpdiag.trace.model import Packet

    try:
        return Packet(src=src, dst=dst, proto=proto, dport=dport, sport=sport, origin=origin, iif=iif)
    except ValueError as exc:
        raise _fail(str(exc), exitcodes.USAGE) from None


def _traced(setup, packet, kernel: bool):
    """The trace of ``packet`` with what was read, and with --kernel the kernel's own trace of the probe beside it."""
    from dataclasses import replace

    from kpdiag.commands.trace import explain_unmatched, label_live
    from kpdiag.errors import InputError

    for problem in setup.problems:
        _say(f"warning: {problem}")
    result = label_live(explain_unmatched(setup.tracer.trace(packet), setup), setup)
    if setup.read:
        result = replace(result, read=setup.read)
    if kernel:
        from kpdiag.trace.kernel import CHANGES, kernel_check

        _say(CHANGES)
        try:
            result = replace(result, kernel=kernel_check(result, setup))
        except InputError as exc:
            raise _fail(str(exc), exitcodes.NO_DIAGNOSIS) from None
    return result


def _render(result, output: str, verbose: bool) -> str:
    from kpdiag.render.trace import trace_to_dot, trace_to_json, trace_to_text

    render = {
        "text": lambda r: trace_to_text(r, verbose),
        "json": trace_to_json,
        "yaml": lambda r: _yaml(trace_to_json(r)),
        "dot": trace_to_dot,
    }[output]
    return render(result)


def _trace_focus(dst: str, dport: int | None, proto: str, mode: str):
    """The destination a live trace reads the rules of (kpdiag/collect/dest_rules.py), or None: --mode names a mode
    whose rules are read whole."""
    from kpdiag.collect.dest_rules import Destination, reads_destination

    if mode != "auto" and not reads_destination(mode):
        return None
    return Destination(dst, dport, proto)


def _first_local(setup, local_ips, family: int = 4, dst: str | None = None) -> str | None:
    """The node's first own address of the packet's family (not loopback, not link-local), or None when none is known:
    a packet the node sends to another host leaves with one of its real addresses, never 127.0.0.1."""
    for ip in local_ips:
        if (":" in ip) == (family == 6):
            return ip
    from kpdiag.parse.addr import int_to_ip

    routing = setup.tracer.routing
    if dst is not None:  # as the kernel picks it: an address of the interface the route to dst leaves by
        from kpdiag.parse.addr import parse_ip

        route = routing.lookup(*parse_ip(dst))
        if route is not None and route.dev and route.dev != "lo":
            mine = sorted(
                v
                for (v, ver), dev in routing.addr_dev.items()
                if dev == route.dev and ver == family and not (family == 6 and v >> 118 == 0x3FA)
            )
            if mine:
                return int_to_ip(mine[0], family)
    candidates = []
    for value, version in routing.local_ips:
        if version != family or (
            value >> 24 == 127 if family == 4 else value == 1 or value >> 118 == 0x3FA
        ):  # fe80::/10
            continue
        dev = routing.addr_dev.get((value, version)) or ""
        # an address of a physical-looking interface before those of bridges, kube-ipvs0, docker0 …
        rank = 1 if dev.startswith(("kube-", "docker", "cni", "cali", "flannel", "cilium", "veth", "lo")) else 0
        candidates.append((rank, value))
    return int_to_ip(min(candidates)[1], family) if candidates else None

"""Load what a trace needs (rules, addresses, routes, ipsets) from files or a bundle."""

from __future__ import annotations

from dataclasses import dataclass, field

from .bundle import Bundle, Problem
from .errors import InputError


@dataclass
class TraceSetup:
    tracer: object
    mode: str
    problems: list[Problem] = field(default_factory=list)


def _read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except PermissionError:
        raise InputError(path, "permission denied") from None
    except IsADirectoryError:
        raise InputError(path, "is a directory, not a file") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None


def _required(state, value, bundle: str, rel: str, what: str):
    """The parsed source, or an InputError that says why it is missing (the file's own problems, first)."""
    if value is None:
        why = "; ".join(str(p) for p in state.problems) or f"{bundle} has no node/{rel}"
        raise InputError(bundle, f"no {what} to trace ({why})")
    return value


def setup_trace(rules: str | None = None, bundle: str | None = None, local_ips=(), ipset_file: str | None = None,
                nft: str | None = None, mode: str = "auto") -> TraceSetup:
    """Build a tracer from ``--rules FILE`` (iptables-save), ``--nft FILE`` (nft -j list ruleset) or ``--bundle``."""
    from .parse.iptables import parse_iptables_save
    from .trace.netfilter import IptablesTracer
    from .trace.routing import RoutingTable

    problems: list[Problem] = []
    ipsets = None
    if nft:
        from .parse.nft import parse_nft_json
        from .trace.nftables import NftTracer

        ruleset = parse_nft_json(_read_file(nft), nft)
        return TraceSetup(NftTracer(ruleset, RoutingTable.from_local_ips(local_ips)), "nftables", problems)
    if rules:
        ruleset = parse_iptables_save(_read_file(rules), rules)
        routing = RoutingTable.from_local_ips(local_ips)
        if ipset_file:
            from .parse.ipset import parse_ipset_save

            data = _read_file(ipset_file)
            try:
                ipsets = parse_ipset_save(data.decode("utf-8", "replace"), ipset_file)
            except InputError as exc:
                problems.append(Problem(f"{exc.source}:{exc.line}" if exc.line else exc.source, exc.message))
    elif bundle:
        from .state import NodeState

        state = NodeState(Bundle.open(bundle))
        if mode == "auto":
            running, _ = state.proxy_mode
            mode = running if running in ("nftables", "ipvs") else "iptables"
        for ip in local_ips:
            from .parse.addr import parse_ip

            state.routing.local_ips.add(parse_ip(ip))
        if mode == "nftables":
            _required(state, state.nft(), bundle, "nft-ruleset.json", "an nftables ruleset")
        else:
            _required(state, state.iptables("iptables-save"), bundle, "iptables-save.txt", "iptables rules")
            if mode == "ipvs" and state.ipvs is None:
                raise InputError(bundle, "no IPVS state to trace (node/ipvsadm.txt missing or unreadable)")
        tracer = state.mode_tracer(mode)  # parses ipsets too: their problems are collected after it
        return TraceSetup(tracer, mode, list(state.problems))
    else:
        raise InputError("kpdiag trace", "give --rules FILE or --bundle DIR")
    return TraceSetup(IptablesTracer(ruleset, routing, ipsets), "iptables", problems)

"""Small helpers that turn state into :class:`~kpdiag.model.Evidence` (source, line, exact text)."""

from __future__ import annotations

from .model import Evidence
from kpdiag.bundle import sources


def sysctl(ctx, key: str) -> Evidence | None:
    v = ctx.sysctl_value(key)
    if v is None:
        return None
    return Evidence(v.source, v.text, v.line)


def sysctl_data(ctx, want: dict) -> dict:
    """A finding's data about kernel settings: each key with the value seen (None: not collected) and the one the
    fix sets — ``{"sysctls": [{"key", "value", "want"}]}``, for scripts that check or apply them."""
    out = []
    for key, value in want.items():
        v = ctx.sysctl_value(key)
        out.append({"key": key, "value": None if v is None else v.value.strip(), "want": str(value)})
    return {"sysctls": out}


def rule(r) -> Evidence:
    return Evidence(r.source, r.text, r.lineno)


def chain(ruleset, table: str, name: str) -> Evidence | None:
    c = ruleset.chain(table, name)
    if c is None:
        return None
    text = f":{name} {c.policy or '-'}" + (f" ({len(c)} rules)" if len(c) else "")
    return Evidence(ruleset.source, text, c.lineno)


def module(ctx, name: str) -> Evidence | None:
    mods = ctx.modules
    if not mods or name not in mods:
        return None
    m = mods[name]
    return Evidence(
        ctx.display(sources.MODULES),
        f"{m.name} {m.size} {m.refcount} {','.join(m.used_by) or '-'} {m.state}",
        m.line,
    )


def config(ctx, key: str) -> Evidence | None:
    cfg = ctx.kube_proxy_config
    if cfg is None:
        return None
    value = cfg.get(key)
    line = cfg.line_of(key)
    text = f"{key}: {value!r}" if value is not None else f"{key} is not set"
    if line is not None:
        text = cfg.text.splitlines()[line - 1].strip()
    return Evidence(cfg.source, text, line)


def metric(ctx, name: str, value) -> Evidence:
    m = ctx.metrics
    return Evidence(ctx.display(sources.KP_METRICS), f"{name} {value}", m.line_of(name) if m else None)


def rule_at(chain, pos: int) -> Evidence:
    """The rule at 0-based ``pos`` of an iptables chain (kpdiag.parse.iptables.Chain), as the file has it."""
    return rule(chain.rule_at(pos))


def nft_rule(ruleset, chain, r) -> Evidence:
    """One rule of an nftables chain (kpdiag.parse.nft), named by its family, table and chain."""
    return Evidence(ruleset.source, f"{chain.family} {chain.table} {chain.name}: {r.text}")


def conntrack_stat(ctx, key: str, value: int) -> Evidence:
    """A counter of ``conntrack -S`` (kpdiag.parse.node.parse_conntrack_stats sums it over the CPUs)."""
    return Evidence(ctx.display(sources.CONNTRACK_STATS), f"{key}={value} (summed over CPUs)")


# What kube-proxy programmed for one Service port, or did not, in each mode's own words (checks/dataplane.py). What is
# not there has no line to quote: the evidence names the parsed file and what was looked for in it.
def iptables_absent(ruleset, name: str) -> Evidence:
    return Evidence(ruleset.source, f'no KUBE-SERVICES rule with comment "{name} cluster IP"')


def iptables_programmed(ruleset, port, have) -> Evidence:
    """``port``: a kpdiag.state.kube_rules.ProgrammedPort; ``have``: the endpoints it sends new connections to."""
    if port.chain:
        return Evidence(ruleset.source, f"{port.chain}: DNAT to {', '.join(sorted(have))}")
    return Evidence(ruleset.source, f'KUBE-SERVICES: "{port.name} has no local endpoints" -j DROP')


def nft_absent(ruleset, family: str, key: tuple) -> Evidence:
    """``key``: (ClusterIP, protocol, port), as kpdiag.state.kube_nft keys the service-ips map."""
    return Evidence(ruleset.source, f"map {family} kube-proxy service-ips: no element {key[0]} . {key[1]} . {key[2]}")


def nft_programmed(ruleset, family: str, port, have) -> Evidence:
    """``port``: a kpdiag.state.kube_nft.NftServicePort; ``have``: the endpoints it sends new connections to."""
    k = port.key
    if port.chain:
        return Evidence(ruleset.source, f"chain {port.chain}: DNAT to {', '.join(sorted(have))}")
    return Evidence(ruleset.source, f"map {family} kube-proxy no-endpoint-services: {k[0]} . {k[1]} . {k[2]} : drop")

"""Small helpers that turn parsed objects into :class:`~kpdiag.model.Evidence` (source, line, exact text)."""

from __future__ import annotations

from .model import Evidence


def clip(text, limit: int) -> str:
    """``text`` in at most about ``limit`` characters, never cut inside a word: cut at the last blank before the
    limit and ended with " …" (a single word longer than the limit is kept whole)."""
    text = str(text)
    if len(text) <= limit:
        return text
    head = text[:limit].rsplit(" ", 1)[0].rstrip()
    if not head or head == text[:limit]:  # one long word: whole, not cut
        return text.split(" ", 1)[0] + (" …" if " " in text else "")
    return head + " …"


def rule(r) -> Evidence:
    return Evidence(r.source, r.text, r.lineno)


def chain(ruleset, table: str, name: str) -> Evidence | None:
    c = ruleset.chain(table, name)
    if c is None:
        return None
    text = f":{name} {c.policy or '-'}" + (f" ({len(c)} rules)" if len(c) else "")
    return Evidence(ruleset.source, text, c.lineno)


def rule_at(chain, pos: int) -> Evidence:
    """The rule at 0-based ``pos`` of an iptables chain (kpdiag.parse.iptables.Chain), as the file has it."""
    return rule(chain.rule_at(pos))


def nft_rule(ruleset, chain, r) -> Evidence:
    """One rule of an nftables chain (kpdiag.parse.nft), named by its family, table and chain."""
    return Evidence(ruleset.source, f"{chain.family} {chain.table} {chain.name}: {r.text}")


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
    """``key``: (ClusterIP, protocol, port), as kpdiag.dataplane.kube_nft keys the service-ips map."""
    return Evidence(ruleset.source, f"map {family} kube-proxy service-ips: no element {key[0]} . {key[1]} . {key[2]}")


def nft_programmed(ruleset, family: str, port, have) -> Evidence:
    """``port``: a kpdiag.dataplane.kube_nft.NftServicePort; ``have``: the endpoints it sends new connections to."""
    k = port.key
    if port.chain:
        return Evidence(ruleset.source, f"chain {port.chain}: DNAT to {', '.join(sorted(have))}")
    return Evidence(ruleset.source, f"map {family} kube-proxy no-endpoint-services: {k[0]} . {k[1]} . {k[2]} : drop")

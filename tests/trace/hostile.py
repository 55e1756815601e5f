"""Rulesets built to exhaust a tracer or a parser (issue: work budgets): used by tests/trace/test_budget.py and by
benchmarks/bench_trace_budget.py. Each is small to write and explosive to walk naively."""

from __future__ import annotations

import json

IPT_HEAD = "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n"


def ipt_jump_ladder(depth: int = 41) -> str:
    """A loop-free ladder: each chain jumps twice to the next (2**depth rule walks for one packet, no loop)."""
    lines = [IPT_HEAD.rstrip("\n")]
    lines += [f":L{i} - [0:0]" for i in range(depth)]
    lines += ["-A PREROUTING -j L0", "-A PREROUTING -p tcp -j DNAT --to-destination 10.244.1.10:8080"]
    for i in range(depth - 1):
        lines += [f"-A L{i} -j L{i + 1}", f"-A L{i} -j L{i + 1}"]
    lines.append(f"-A L{depth - 1} -j MARK --or-mark 0x1")  # not terminal: every walk returns to its caller
    return "\n".join(lines + ["COMMIT", ""])


def ipt_statistic_ladder(depth: int = 41) -> str:
    """Each chain forks (-m statistic 0.5) into the next on both sides: 2**depth paths."""
    lines = [IPT_HEAD.rstrip("\n")]
    lines += [f":S{i} - [0:0]" for i in range(depth)]
    lines.append("-A PREROUTING -j S0")
    for i in range(depth - 1):
        lines += [
            f"-A S{i} -m statistic --mode random --probability 0.50000000000 -j S{i + 1}",
            f"-A S{i} -j S{i + 1}",
        ]
    lines.append(f"-A S{depth - 1} -p tcp -j DNAT --to-destination 10.244.1.10:8080")
    return "\n".join(lines + ["COMMIT", ""])


def ipt_huge_comment(mbytes: int = 10) -> str:
    """One rule whose quoted comment is ``mbytes`` MB long (with an escaped quote in it)."""
    body = ("x" * 1023 + "y") * (mbytes * 1024) + '\\"end'
    return (
        "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
        f'-A FORWARD -p tcp -m comment --comment "{body}" -j DROP\nCOMMIT\n'
    )


# ---------------------------------------------------------------------- nftables (the JSON of nft -j list ruleset)
def _doc(chains: dict[str, list[list]], sets: list | None = None, base: str = "pre") -> str:
    items: list[dict] = [{"metainfo": {"version": "1.0.6", "json_schema_version": 1}}]
    items.append({"table": {"family": "ip", "name": "t", "handle": 1}})
    handle = 2
    for s in sets or []:
        items.append({"map": {"family": "ip", "table": "t", "handle": handle, **s}})
        handle += 1
    for name in chains:
        chain = {"family": "ip", "table": "t", "name": name, "handle": handle}
        if name == base:
            chain.update(type="nat", hook="prerouting", prio=-100, policy="accept")
        items.append({"chain": chain})
        handle += 1
    for name, rules in chains.items():
        for expr in rules:
            items.append({"rule": {"family": "ip", "table": "t", "chain": name, "handle": handle, "expr": expr}})
            handle += 1
    return json.dumps({"nftables": items})


def _numgen_vmap(mod: int, elems: list) -> dict:
    return {"vmap": {"key": {"numgen": {"mode": "random", "mod": mod, "offset": 0}}, "data": {"set": elems}}}


def nft_numgen_huge(mod: int = 100_000_000) -> str:
    """numgen random mod 100000000 with a two-element vmap: 10**8 indices, two outcomes."""
    return _doc(
        {
            "pre": [
                [_numgen_vmap(mod, [[0, {"jump": {"target": "a"}}], [{"range": [1, mod - 1]}, {"drop": None}]])],
            ],
            "a": [[{"dnat": {"addr": "10.244.1.10", "port": 8080}}]],
        }
    )


def nft_numgen_ladder(depth: int = 41) -> str:
    """Each chain forks in two by numgen into the next (a jump and a goto: two distinct verdicts): 2**depth paths."""
    chains: dict[str, list[list]] = {"pre": [[{"jump": {"target": "n0"}}]]}
    for i in range(depth - 1):
        nxt = f"n{i + 1}"
        chains[f"n{i}"] = [[_numgen_vmap(2, [[0, {"jump": {"target": nxt}}], [1, {"goto": {"target": nxt}}]])]]
    chains[f"n{depth - 1}"] = [[{"dnat": {"addr": "10.244.1.10", "port": 8080}}]]
    return _doc(chains)


def nft_vmap_ladder(depth: int = 41) -> str:
    """Chained verdict maps: each chain has two vmap rules that both jump to the next (2**depth rule walks)."""
    dport = {"payload": {"protocol": "tcp", "field": "dport"}}
    daddr = {"payload": {"protocol": "ip", "field": "daddr"}}
    chains: dict[str, list[list]] = {
        "pre": [[{"jump": {"target": "v0"}}], [{"dnat": {"addr": "10.244.1.10", "port": 8080}}]]
    }
    for i in range(depth - 1):
        nxt = {"jump": {"target": f"v{i + 1}"}}
        chains[f"v{i}"] = [
            [{"vmap": {"key": dport, "data": {"set": [[80, nxt]]}}}],
            [{"vmap": {"key": daddr, "data": {"set": [["10.96.0.1", nxt]]}}}],
        ]
    chains[f"v{depth - 1}"] = [[{"counter": {"packets": 0, "bytes": 0}}]]  # not terminal: every walk returns
    return _doc(chains)

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


def log_line(ctx, lineno: int, text: str) -> Evidence:
    return Evidence(ctx.display(sources.KP_LOG), text.strip()[:400], lineno)


def metric(ctx, name: str, value) -> Evidence:
    m = ctx.metrics
    return Evidence(ctx.display(sources.KP_METRICS), f"{name} {value}", m.line_of(name) if m else None)

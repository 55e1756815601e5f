"""Many node reports → one cluster report.

Input: one :class:`NodeResult` per node — the node's ``kpdiag node -o json`` report (a dict), or the reason it
could not be had. Output: a :class:`~kpdiag.model.Report` whose findings are the cluster-scope checks (KP8xx)
and the node findings that only some nodes have; ``extra["nodes"]`` is the per-node summary table and
``extra["failures"]`` the nodes that were not diagnosed, each with its reason.

The work is linear in the number of nodes: one pass to summarise, the programmed-service tables compared by
digest first (identical nodes share one decoded table).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from typing import cast

from .. import __version__
from ..model import REPORT_SCHEMA, Report
from .budget import ReportBudget, ReportsOverBudget, table_weight, weight

FAILURE_KINDS = (
    "unschedulable",
    "not admitted",
    "image pull",
    "timeout",
    "not json",
    "bad report",
    "api error",
    "pod failed",
    "interrupted",
    "not read",  # over kpdiag's cap on the memory of all node reports together (kpdiag/fleet/budget.py)
    "no thread",  # kpdiag could not start a thread to run it (the process's limit on threads)
)


def _fix(f: dict) -> tuple:
    """A node's fix steps with the kinds its report gave them (validated by the normalisation above), else plain."""
    from ..fixcmd import FixStep

    steps = f.get("fix_steps")
    if isinstance(steps, list) and steps:
        return tuple(FixStep(str(x["text"]), x["kind"]) for x in steps)
    return tuple(str(x) for x in f.get("fix") or ())


@dataclass
class NodeResult:
    node: str
    report: dict | None = None  # the node's kpdiag.report/v1 document
    failure: str | None = None  # why there is no report (one line)
    kind: str | None = None  # one of FAILURE_KINDS
    seconds: float | None = None
    source: str | None = None  # the file it was read from (analyze DIR)

    @property
    def ok(self) -> bool:
        return self.report is not None


@dataclass
class FleetState:
    """What the cluster-scope checks look at."""

    results: list[NodeResult]
    api_version: str | None = None  # the API server's gitVersion, when asked
    local_itp: set[str] = field(default_factory=set)  # "ClusterIP:port/proto" keys with internalTrafficPolicy: Local
    api_known: bool = False  # local_itp comes from the API (else unknown)

    @property
    def local_keys(self) -> set[str]:
        """internalTrafficPolicy: Local service ports, from the API and from the nodes' own rules (iptables and
        nftables mode mark them in their programmed tables)."""
        self.programmed_groups()
        return self.__dict__["_local"]

    @property
    def policy_known(self) -> bool:
        """Can every compared node's table tell internalTrafficPolicy: Local apart (or was the API read)?"""
        return self.api_known or all(doc.get("policy") is True for doc, _, _ in self.programmed_groups())

    @cached_property
    def ok(self) -> list[NodeResult]:
        return [r for r in self.results if r.ok]

    def fact(self, r: NodeResult, key: str):
        return r.report["facts"].get(key) if r.report else None

    def node_findings_by_check(self) -> dict[str, list[tuple[str, dict]]]:
        """Every node finding, by check id: [(node, finding dict)]."""
        if "_by_check" not in self.__dict__:
            out: dict[str, list[tuple[str, dict]]] = {}
            for r in self.ok:  # normalised: findings are dicts with a str id
                for f in (r.report or {}).get("findings") or ():
                    out.setdefault(f["id"], []).append((r.node, f))
            self.__dict__["_by_check"] = out
        return self.__dict__["_by_check"]

    def common_threshold(self) -> int:
        """A node finding on at least this many nodes is reported once (KP805), not once per node."""
        return max(3, -(-len(self.ok) // 2))

    def programmed_groups(self) -> list[tuple[dict, list[str], dict[str, tuple[str, str, int]]]]:
        """Nodes grouped by programmed digest: (one document, node names, its decoded table), biggest group first."""
        if "_groups" not in self.__dict__:
            from kpdiag.state.programmed import decode

            groups: dict[str, tuple[dict, list[str]]] = {}
            for r in self.ok:  # normalised: a programmed table, when there, has a str digest and entries
                doc = ((r.report or {}).get("extra") or {}).get("programmed")
                if doc is not None:
                    groups.setdefault(doc["digest"], (doc, []))[1].append(r.node)
            local = set(self.local_itp)
            out = [(doc, nodes, decode(doc, local)) for doc, nodes in groups.values()]
            out.sort(key=lambda g: -len(g[1]))
            self.__dict__["_groups"] = out
            self.__dict__["_local"] = local
        return self.__dict__["_groups"]


def node_row(r: NodeResult) -> dict:
    """One line of the per-node table."""
    if not r.ok:
        return {"node": r.node, "status": f"failed: {r.failure}", "kind": r.kind}
    rep = r.report or {}
    f = rep.get("facts") or {}
    ct = f.get("conntrack") or {}
    prog = (rep.get("extra") or {}).get("programmed") or {}
    summary = rep.get("summary") or {}
    return {
        "node": r.node,
        "status": "ok" if rep.get("readable", True) else "unreadable",
        "mode": f.get("proxy_mode"),
        "kube_proxy": f.get("kube_proxy_version"),
        "kernel": f.get("kernel"),
        "iptables_rules": f.get("iptables_rules"),
        "service_ports": prog.get("count", f.get("service_ports_programmed")),
        "conntrack": f"{ct['count']}/{ct['max']}" if ct.get("max") else None,
        "conntrack_pct": round(100.0 * ct["count"] / ct["max"], 1) if ct.get("max") else None,
        "error": summary.get("error", 0),
        "warning": summary.get("warning", 0),
        "info": summary.get("info", 0),
        "service": _trace_summary((rep.get("extra") or {}).get("traces")),
    }


def _trace_summary(traces) -> str | None:
    """`--service`: what the node does with the Service's packets, per origin (pod / external)."""
    if not isinstance(traces, list) or not traces:
        return None
    out = []
    for t in traces:
        if not isinstance(t, dict):
            continue
        paths = [p for p in t.get("paths") or [] if isinstance(p, dict)]
        verdicts = "/".join(sorted({str(p.get("verdict")) for p in paths})) or "no path"
        dnat = len({str(p.get("dnat")) for p in paths if p.get("dnat")})
        packet = t.get("packet")
        packet = packet if isinstance(packet, dict) else {}
        out.append(f"{packet.get('from', '?')} {verdicts}" + (f"→{dnat} ep" if dnat else ""))
    return ", ".join(dict.fromkeys(out))


_FACT_TYPES = {
    "node": str,
    "proxy_mode": str,
    "proxy_mode_source": str,
    "kernel": str,
    "iptables_rules": int,
    "iptables_backend": str,
    "service_ports_programmed": int,
    "kube_proxy_version": str,
    "conntrack": dict,
}
_FINDING_TEXT = ("id", "slug", "title", "summary", "explanation")


def _is(value, kind) -> bool:
    return isinstance(value, kind) and not (kind is int and isinstance(value, bool))


def normalize(report: dict, problems: list | None = None) -> dict:
    """Make a node report safe to read: every part the aggregation uses gets its JSON type, or is dropped (a
    report edited by hand, cut short or from another tool must not crash the cluster report). A finding dropped is
    said in ``problems`` (one line), never silently."""
    for key, kind in (("facts", dict), ("extra", dict), ("summary", dict), ("findings", list)):
        if not isinstance(report.get(key), kind):
            report[key] = kind()
    _normalize_facts(report["facts"])
    report["summary"] = {k: v if _is(v := report["summary"].get(k), int) else 0 for k in ("error", "warning", "info")}
    if not isinstance(report.get("readable", True), bool):
        report["readable"] = True
    findings = [f for f in report["findings"] if _normalize_finding(f)]
    dropped = len(report["findings"]) - len(findings)
    report["findings"] = findings
    if dropped and problems is not None:
        problems.append(
            f"{dropped} finding{'s' if dropped > 1 else ''} of its report left out: not of the report's schema (an id "
            "KPnnn, a severity error, warning or info)"
        )
    _normalize_extra(report["extra"])
    return report


def _normalize_facts(facts: dict) -> None:
    for key, kind in _FACT_TYPES.items():
        if key in facts and not _is(facts[key], kind):
            facts.pop(key)
    ct = facts.get("conntrack")
    if ct is not None and not (_is(ct.get("count"), int) and _is(ct.get("max"), int) and ct["max"] > 0):
        facts.pop("conntrack")


def _normalize_finding(f: object) -> bool:
    """Give one finding (in place) the types of the cluster report's schema; False when it cannot have them (an id
    KPnnn and a severity error, warning or info are needed): then it is left out."""
    if (
        not isinstance(f, dict)
        or not isinstance(f.get("id"), str)
        or not re.fullmatch(r"KP[0-9]{3}", f["id"])
        or f.get("severity") not in ("error", "warning", "info")
    ):
        return False
    for key in _FINDING_TEXT:
        f[key] = "" if f.get(key) is None else str(f.get(key))
    if not re.fullmatch(r"[a-z0-9-]+", f["slug"]):
        f["slug"] = re.sub(r"[^a-z0-9-]+", "-", f["slug"].lower()).strip("-") or "unknown"
    f["subject"] = None if f.get("subject") is None else str(f.get("subject"))
    f["fix"] = [str(x) for x in f["fix"]] if isinstance(f.get("fix"), list) else []
    if "data" in f and not isinstance(f["data"], dict):
        f.pop("data")  # the finding's data is an object (the cluster report's schema)
    if not _fix_steps_match(f.get("fix_steps"), f["fix"]):
        f.pop("fix_steps", None)  # an older kpdiag's report (or a forged one): the kinds are derived again
    f["references"] = [str(x) for x in f["references"]] if isinstance(f.get("references"), list) else []
    f["evidence"] = [e for e in f["evidence"] if isinstance(e, dict)] if isinstance(f.get("evidence"), list) else []
    return True


def _fix_steps_match(steps: object, fix: list[str]) -> bool:
    """Are a finding's fix steps its fix, step by step, each a command or a note?"""
    return (
        isinstance(steps, list)
        and len(steps) == len(fix)
        and all(
            isinstance(x, dict) and x.get("kind") in ("command", "note") and x.get("text") == t
            for x, t in zip(steps, fix)
        )
    )


def _normalize_extra(extra: dict) -> None:
    prog = extra.get("programmed")
    if prog is not None and not (
        isinstance(prog, dict) and isinstance(prog.get("entries"), str) and isinstance(prog.get("digest"), str)
    ):
        extra.pop("programmed")
    elif prog is not None and not _is(prog.get("count"), int):
        prog["count"] = None
    if "traces" in extra and not isinstance(extra["traces"], list):
        extra.pop("traces")


def aggregate(
    results: list[NodeResult],
    *,
    api_version: str | None = None,
    local_itp: set[str] | None = None,
    select=(),
    ignore=(),
    subject: str | None = None,
) -> Report:
    from ..checkapi import load_registry, run_checks, select_checks

    unread: list[dict] = []
    for r in results:
        if r.report is not None:
            said: list[str] = []
            normalize(r.report, said)
            unread += [{"source": f"node {r.node}", "error": why} for why in said]
    state = FleetState(results, api_version, set(local_itp or ()), local_itp is not None)
    registry = load_registry()
    chosen = [c for c in select_checks(registry.checks, select, ignore) if c.scope == "cluster"]
    findings, runs = run_checks(state, chosen)
    findings = sorted(
        findings + _node_findings(state, select, ignore), key=lambda f: (-f.severity.rank, f.id, f.subject or "")
    )
    problems = [{"source": f"node {r.node}", "error": r.failure} for r in results if not r.ok]
    problems += unread + [{"source": f"plugin {name}", "error": why} for name, why in registry.load_errors]
    ok = state.ok
    modes = Counter(state.fact(r, "proxy_mode") or "unknown" for r in ok)
    facts = {
        "nodes": len(results),
        "nodes_diagnosed": len(ok),
        "nodes_failed": len(results) - len(ok),
        "proxy_modes": dict(modes.most_common()),
    }
    if api_version:
        facts["api_server_version"] = api_version
    return Report(
        subject=subject or f"cluster ({len(results)} node{'s' if len(results) != 1 else ''})",
        findings=tuple(findings),
        checks=tuple(runs),
        problems=tuple(problems),
        facts=facts,
        readable=bool(ok),
        kpdiag_version=__version__,
        kind="cluster",
        extra={
            "nodes": [node_row(r) for r in sorted(results, key=lambda r: r.node)],
            "failures": [{"node": r.node, "kind": r.kind, "reason": r.failure} for r in results if not r.ok],
        },
    )


def _node_findings(state: FleetState, select=(), ignore=()) -> list:
    """Node findings that only a few nodes have, each named by its node (the common ones are KP805's)."""
    from ..checkapi import CheckSpec, select_checks
    from ..model import Evidence, Finding, Severity

    threshold = state.common_threshold() if len(state.ok) >= 3 else len(state.ok) + 1
    out = []
    for cid, hits in state.node_findings_by_check().items():
        if len({n for n, _ in hits}) >= threshold:
            continue
        for node, f in hits:
            try:
                sev = Severity(f.get("severity"))
            except ValueError:
                continue
            named = cast("list[CheckSpec]", [_Named(cid, str(f.get("slug", "")))])  # only .id and .slug are read
            if (select or ignore) and not select_checks(named, select, ignore):
                continue
            evidence = tuple(
                Evidence(
                    str(e.get("source")),
                    str(e.get("text")),
                    line if isinstance(line := e.get("line"), int) and line > 0 else None,
                )
                for e in f.get("evidence") or []
                if isinstance(e, dict)
            )
            out.append(
                Finding(
                    id=cid,
                    slug=str(f.get("slug", "")),
                    severity=sev,
                    title=str(f.get("title", "")),
                    summary=f"{node}: {f.get('summary', '')}",
                    explanation=str(f.get("explanation") or f.get("title") or cid),
                    fix=_fix(f) or (f"kpdiag explain {cid}",),
                    data=f["data"] if isinstance(f.get("data"), dict) else {},
                    evidence=evidence,
                    references=tuple(str(x) for x in f.get("references") or ()),
                    subject=f"{node} {f.get('subject') or ''}".strip(),
                )
            )
    return out


@dataclass
class _Named:
    id: str
    slug: str


# ---------------------------------------------------------------- reading node reports from a directory


def aggregate_dir(path: str, select=(), ignore=()) -> Report:
    """``kpdiag analyze DIR`` on a directory of node reports."""
    results, meta = read_report_dir(path)
    local = meta.get("local_itp")
    return aggregate(
        results,
        api_version=meta.get("api_version"),
        local_itp=set(local) if isinstance(local, list) else None,
        select=select,
        ignore=ignore,
        subject=f"cluster ({len(results)} node reports in {path})",
    )


NODES_DIR = "nodes"  # kpdiag cluster --save-dir: nodes/<node>.json, and the run's cluster.json beside it
MAX_REPORT_BYTES = 64 * 1024 * 1024  # one node report (a 10,000-Service node's is about 0.6 MB)


def looks_like_report_dir(path: str) -> bool:
    """A directory of node reports (``nodes/*.json`` and ``cluster.json``, or the older ``*.json`` side by side),
    not a bundle (which has kpdiag.json / node/ / cluster/)."""
    if (
        not os.path.isdir(path)
        or os.path.exists(os.path.join(path, "kpdiag.json"))
        or os.path.isdir(os.path.join(path, "node"))
    ):
        return False
    nodes = os.path.join(path, NODES_DIR)
    if os.path.isdir(nodes) and not os.path.islink(nodes) and any(n.endswith(".json") for n in os.listdir(nodes)):
        return True
    return any(n.endswith(".json") for n in os.listdir(path))


def _read_report_bytes(path: str, rel: str) -> bytes:
    """A report file under the directory PATH: a regular file reached without any symlink, at most MAX_REPORT_BYTES."""
    from kpdiag.bundle.safeio import BENEATH, read_file

    return read_file(path, rel, MAX_REPORT_BYTES, BENEATH)


def _read_report_text(path: str, rel: str) -> str:
    return _read_report_bytes(path, rel).decode("utf-8", "replace")


def parse_node_report(text: str, source: str) -> tuple[dict | None, str | None]:
    """A node report from text that may carry other lines around it (a pod log): (report, None) or (None, why)."""
    from kpdiag.parse.decode import TooDeep, raw_decode_json

    start = text.find("{")
    while start != -1:
        try:
            doc, _ = raw_decode_json(text, start)
        except TooDeep as exc:
            return None, f"{source}: JSON {exc}"
        except json.JSONDecodeError:
            start = text.find("\n{", start + 1)
            start = start + 1 if start != -1 else -1
            continue
        if isinstance(doc, dict) and doc.get("schema") == REPORT_SCHEMA:
            kind = doc.get("kind", "node")  # reports of earlier kpdiag carry no kind: node reports
            if kind != "node":
                return None, f"{source}: a kpdiag {str(kind)[:20]!r} report, not a node report"
            return doc, None
        return (
            None,
            f"{source}: JSON, but not a kpdiag node report (schema {doc.get('schema') if isinstance(doc, dict) else type(doc).__name__!r})",
        )
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return None, f"{source}: not JSON" + (f" (starts with {first[:80]!r})" if first else " (empty)")


def intern_programmed(report: dict, seen: dict[str, dict]) -> bool:
    """Nodes with the same programmed digest share one table in memory (1,000 nodes × 10,000 Services: 0.5 GB → 1 copy).
    True when the report's table is now one kept before."""
    prog = (report.get("extra") or {}).get("programmed")
    if isinstance(prog, dict) and isinstance(prog.get("digest"), str):
        report["extra"]["programmed"] = kept = seen.setdefault(prog["digest"], prog)
        return kept is not prog
    return False


def read_report_dir(path: str) -> tuple[list[NodeResult], dict]:
    """Node reports saved by ``kpdiag cluster --save-dir`` (``nodes/*.json``; older runs wrote them beside
    ``cluster.json``), or any ``*.json`` node reports, plus the run's ``cluster.json`` when present (failures,
    API version, traffic-policy keys). Only regular files are read, none through a symlink."""
    from kpdiag.bundle.safeio import describe
    from kpdiag.parse.decode import load_json

    results: list[NodeResult] = []
    meta: dict = {}
    meta_path = os.path.join(path, "cluster.json")
    if os.path.lexists(meta_path):
        try:
            meta = load_json(_read_report_text(path, "cluster.json"))
            if not isinstance(meta, dict):
                raise ValueError("not a JSON object")
        except OSError as exc:
            results.append(
                NodeResult(
                    "cluster.json", failure=f"{meta_path}: unreadable run summary ({describe(exc)})", kind="not json"
                )
            )
            meta = {}
        except ValueError as exc:
            results.append(
                NodeResult("cluster.json", failure=f"{meta_path}: unreadable run summary ({exc})", kind="not json")
            )
            meta = {}
    seen: dict[str, dict] = {}  # programmed digest → the first such table: identical nodes share one copy
    budget = ReportBudget()  # what the reports kept take together
    rels = [
        n for n in sorted(os.listdir(path)) if n.endswith(".json") and n not in ("cluster.json", "scenario.json")
    ]  # the run's summary; a fixture's description
    nodes = os.path.join(path, NODES_DIR)
    if os.path.isdir(nodes) and not os.path.islink(nodes):  # here a node may be called cluster or scenario
        rels += [f"{NODES_DIR}/{n}" for n in sorted(os.listdir(nodes)) if n.endswith(".json")]
    files = meta.get("files")
    names: dict = files if isinstance(files, dict) else {}
    for rel in rels:
        # a run's files are named after the Kubernetes node (cluster.json's "files" has the full name of each);
        # loose reports carry the host name they ran on
        r = read_report_file(os.path.join(path, rel), seen, named_by_file=bool(meta), root=path, rel=rel, budget=budget)
        if isinstance(names.get(rel), str) and names[rel]:
            r.node = names[rel]
        results.append(r)
    for f in meta.get("failures") or []:
        if isinstance(f, dict) and f.get("node"):
            results.append(NodeResult(str(f["node"]), failure=str(f.get("reason")), kind=f.get("kind")))
    return results, meta


def read_report_file(
    file: str,
    seen: dict[str, dict] | None = None,
    named_by_file: bool = False,
    root: str | None = None,
    rel: str | None = None,
    budget: ReportBudget | None = None,
) -> NodeResult:
    """One node report file (``kpdiag node -o json`` output, stray lines around it allowed) as a NodeResult; an
    unreadable or foreign file is a named failure. Within a report directory (``root``, ``rel``) only a regular
    file reached without symlinks is read; a file given by itself is opened non-blocking, regular files only. With a
    ``budget``, a report that would take the reports kept past its cap is not kept (a named failure)."""
    from kpdiag.bundle.safeio import describe

    node = os.path.basename(file)
    node = node[: -len(".json")] if node.endswith(".json") else node
    try:
        if root is not None:
            raw = _read_report_bytes(root, rel or "")
        else:
            raw = _read_report_bytes(os.path.dirname(os.path.abspath(file)), os.path.basename(file))
    except OSError as exc:
        return NodeResult(node, failure=f"{file}: {describe(exc)}", kind="not json", source=file)
    cost = weight(raw)
    if budget is not None:
        try:
            budget.take(cost)
        except ReportsOverBudget:
            return NodeResult(node, failure=budget.reason(file), kind="not read", source=file)
    report, why = parse_node_report(raw.decode("utf-8", "replace"), file)
    del raw
    if report is None:
        if budget is not None:
            budget.give(cost)
        return NodeResult(node, failure=why, kind="not json", source=file)
    if seen is not None and intern_programmed(report, seen) and budget is not None:
        budget.give(min(cost, table_weight(report)))  # identical tables of several files share one copy
    name = node if named_by_file else ((report.get("facts") or {}).get("node") or node)
    return NodeResult(name, report=report, source=file)


def looks_like_report_file(path: str) -> bool:
    """A file holding a JSON object (a node report, maybe with a pod log's lines around it), not a bundle archive."""
    import tarfile

    try:
        if not os.path.isfile(path) or tarfile.is_tarfile(path):
            return False
        with open(path, "rb") as fh:
            return b"{" in fh.read(65536)
    except OSError:
        return False


def aggregate_files(paths: list[str], select=(), ignore=()) -> Report:
    """``kpdiag analyze REPORT.json``: node reports given one by one."""
    seen: dict[str, dict] = {}
    budget = ReportBudget()
    results = [read_report_file(p, seen, budget=budget) for p in paths]
    what = paths[0] if len(paths) == 1 else f"{len(paths)} node reports"
    return aggregate(results, select=select, ignore=ignore, subject=f"cluster ({what})")


FILE_NAME_MAX = 120  # bytes of a node's file name before ".json": far below every file system's 255


def report_file_name(node: str, taken: set[str]) -> str:
    """nodes/<name>.json for a node: only [A-Za-z0-9._-], never hidden, '.' or '..', never twice; a name longer than
    FILE_NAME_MAX (a node name may have 253 characters) is cut and ends in a hash of the whole name, which
    cluster.json's ``files`` keeps (what ``kpdiag analyze DIR`` names the node by)."""
    import hashlib
    import re

    base = re.sub(r"[^A-Za-z0-9._-]", "_", node) or "_"
    if base.startswith("."):
        base = "_" + base
    if len(base) > FILE_NAME_MAX:
        base = f"{base[: FILE_NAME_MAX - 17]}-{hashlib.sha256(node.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}"
    name, i = base, 1
    while name in taken:
        i += 1
        name = f"{base}~{i}"
    taken.add(name)
    return f"{name}.json"


def write_report_dir(path: str, results: list[NodeResult], meta: dict, force: bool = False) -> None:
    """Each node's report as ``nodes/<node>.json`` and the run (failures, API version, traffic-policy keys) as
    ``cluster.json``: what ``kpdiag analyze DIR`` reads back. PATH is created new (or, with ``force``, an
    existing directory is written into); files are created afresh, 0600, never through a symlink."""
    from kpdiag.bundle.safeio import OutputDir

    taken: set[str] = set()
    files: dict[str, str] = {}
    with OutputDir(path, force) as out:
        for r in results:
            if r.ok:
                rel = f"{NODES_DIR}/{report_file_name(r.node, taken)}"
                out.write(rel, json.dumps(r.report).encode())
                files[rel] = r.node
        doc = dict(meta)
        doc["files"] = files  # file → the node's full name (names are cut, hashed and made file-safe)
        doc["failures"] = [{"node": r.node, "kind": r.kind, "reason": r.failure} for r in results if not r.ok]
        out.write("cluster.json", json.dumps(doc, indent=1).encode())

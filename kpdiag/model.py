"""Findings, check results and reports: frozen dataclasses, JSON-ready."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

REPORT_SCHEMA = "kpdiag.report/v1"


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return _RANK[self.value]


_RANK = {"info": 1, "warning": 2, "error": 3}


@dataclass(frozen=True)
class Evidence:
    """Where kpdiag saw it: a source (file[:line]) and the exact text."""

    source: str
    text: str
    line: int | None = None

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        return f"{where}: {self.text}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Evidence":
        return cls(str(d["source"]), str(d["text"]), d.get("line"))


@dataclass(frozen=True)
class Finding:
    id: str
    slug: str
    severity: Severity
    title: str
    summary: str  # this case, with names and addresses
    explanation: str  # why, for a newcomer
    fix: tuple[str, ...] = ()  # concrete commands or steps, in order
    evidence: tuple[Evidence, ...] = ()
    references: tuple[str, ...] = ()
    subject: str | None = None  # e.g. "node", "shop/web:80", "10.96.0.10"
    # the case as data, for scripts (JSON values only): e.g. {"service": "shop/web", "port": 80, "stale": [...]}
    data: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    # the finding this one follows from, in the same report: {"id": "KP707", "subject": "node"} (kpdiag/rootcause.py)
    caused_by: dict[str, Any] | None = field(default=None, hash=False)

    def fix_steps(self) -> list[dict[str, Any]]:
        """The fix as typed steps: ``{"kind": "command" | "note", "text": ...}`` (kpdiag.fixcmd.step_kind)."""
        from .fixcmd import step_kind

        return [{"kind": step_kind(s), "text": str(s)} for s in self.fix]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Finding":
        """A finding read back from a report's JSON (the fix steps keep their kinds)."""
        from .fixcmd import FixStep

        steps = d.get("fix_steps")
        fix = tuple(FixStep(x["text"], x["kind"]) for x in steps) if steps else tuple(d.get("fix") or ())
        return cls(
            id=d["id"],
            slug=d["slug"],
            severity=Severity(d["severity"]),
            title=d["title"],
            summary=d["summary"],
            explanation=d["explanation"],
            fix=fix,
            evidence=tuple(Evidence.from_dict(e) for e in d.get("evidence") or ()),
            references=tuple(d.get("references") or ()),
            subject=d.get("subject"),
            data=dict(d.get("data") or {}),
            caused_by=_cause_ref(d.get("caused_by")),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "slug": self.slug,
            "severity": self.severity.value,
            "title": self.title,
            "summary": self.summary,
            "explanation": self.explanation,
            "fix": list(self.fix),
            "fix_steps": self.fix_steps(),
            "evidence": [e.to_dict() for e in self.evidence],
            "references": list(self.references),
            "subject": self.subject,
            **({"data": self.data} if self.data else {}),
            **({"caused_by": dict[str, Any](self.caused_by)} if self.caused_by else {}),
        }


def _cause_ref(ref: object) -> dict[str, Any] | None:
    """A ``caused_by`` link read back: ``{"id", "subject"}`` or None."""
    if not isinstance(ref, dict) or not ref.get("id"):
        return None
    return {"id": str(ref["id"]), "subject": None if ref.get("subject") is None else str(ref["subject"])}


@dataclass(frozen=True)
class CheckRun:
    """What happened to one check: it ran (with N findings), was skipped (why), or failed."""

    id: str
    slug: str
    status: str  # ran | skipped | error
    reason: str | None = None
    findings: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CheckRun":
        return cls(d["id"], d["slug"], d["status"], d.get("reason"), int(d.get("findings") or 0))


@dataclass(frozen=True)
class Report:
    subject: str  # node name, bundle path, service …
    findings: tuple[Finding, ...]
    checks: tuple[CheckRun, ...]
    problems: tuple[dict[str, Any], ...] = ()  # unreadable / uncollected sources: {"source", "error"}
    facts: dict[str, Any] = field(default_factory=dict)  # mode, kernel, rule counts … (what was seen)
    readable: bool = True  # False when nothing at all could be read
    kpdiag_version: str = ""
    extra: dict[str, Any] = field(
        default_factory=dict
    )  # the command's own sections (one schema per kind, kpdiag/schemas)
    kind: str = "node"  # node (kpdiag node, analyze of a bundle) | service (kpdiag svc) | cluster (kpdiag cluster)

    def severities(self) -> list[str]:
        return [f.severity.value for f in self.findings]

    def counts(self) -> dict[str, int]:
        out = {"error": 0, "warning": 0, "info": 0}
        for f in self.findings:
            out[f.severity.value] += 1
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Report":
        """A report read back from its JSON (``kpdiag … -o json``): ``Report.from_dict(r.to_dict()) == r``."""
        if d.get("schema") != REPORT_SCHEMA:
            raise ValueError(f"not a {REPORT_SCHEMA} document (schema {d.get('schema')!r})")
        return cls(
            subject=d["subject"],
            findings=tuple(Finding.from_dict(f) for f in d.get("findings") or ()),
            checks=tuple(CheckRun.from_dict(c) for c in d.get("checks") or ()),
            problems=tuple(d.get("problems") or ()),
            facts=dict(d.get("facts") or {}),
            readable=bool(d.get("readable", True)),
            kpdiag_version=str(d.get("kpdiag_version") or ""),
            extra=dict(d.get("extra") or {}),
            kind=str(d.get("kind") or "node"),  # reports of kpdiag < 0.1 carried no kind: they are node reports
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": REPORT_SCHEMA,
            "kind": self.kind,
            "kpdiag_version": self.kpdiag_version,
            "subject": self.subject,
            "readable": self.readable,
            "summary": self.counts(),
            "facts": self.facts,
            "findings": [f.to_dict() for f in self.findings],
            "checks": [c.to_dict() for c in self.checks],
            "problems": list(self.problems),
            "extra": self.extra,
        }

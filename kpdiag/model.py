"""Findings, check results and reports: frozen dataclasses, JSON-ready."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum

REPORT_SCHEMA = "kpdiag.report/v1"


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return {"info": 1, "warning": 2, "error": 3}[self.value]


@dataclass(frozen=True)
class Evidence:
    """Where kpdiag saw it: a source (file[:line]) and the exact text."""

    source: str
    text: str
    line: int | None = None

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        return f"{where}: {self.text}"

    def to_dict(self) -> dict:
        return asdict(self)


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

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "slug": self.slug,
            "severity": self.severity.value,
            "title": self.title,
            "summary": self.summary,
            "explanation": self.explanation,
            "fix": list(self.fix),
            "evidence": [e.to_dict() for e in self.evidence],
            "references": list(self.references),
            "subject": self.subject,
        }


@dataclass(frozen=True)
class CheckRun:
    """What happened to one check: it ran (with N findings), was skipped (why), or failed."""

    id: str
    slug: str
    status: str  # ran | skipped | error
    reason: str | None = None
    findings: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Report:
    subject: str  # node name, bundle path, service …
    findings: tuple[Finding, ...]
    checks: tuple[CheckRun, ...]
    problems: tuple[dict, ...] = ()  # unreadable / uncollected sources: {"source", "error"}
    facts: dict = field(default_factory=dict)  # mode, kernel, rule counts … (what was seen)
    readable: bool = True  # False when nothing at all could be read
    kpdiag_version: str = ""
    extra: dict = field(default_factory=dict)  # e.g. trace results, probe results

    def severities(self) -> list[str]:
        return [f.severity.value for f in self.findings]

    def counts(self) -> dict[str, int]:
        out = {"error": 0, "warning": 0, "info": 0}
        for f in self.findings:
            out[f.severity.value] += 1
        return out

    def to_dict(self) -> dict:
        return {
            "schema": REPORT_SCHEMA,
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

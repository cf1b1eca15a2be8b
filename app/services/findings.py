"""Reading analysis results: a run's findings, its verdict, and its checkpoints' verdicts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.models import Checkpoint, Finding, Project, Run

SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}


def list_findings(
    *, session: Session, run_id: int, severity: str | None = None, kind: str | None = None
) -> list[Finding]:
    query = select(Finding).where(Finding.run_id == run_id)
    if severity:
        query = query.where(Finding.severity == severity)
    if kind:
        query = query.where(Finding.kind == kind)
    return list(session.scalars(query.order_by(Finding.step, Finding.id)))


@dataclass
class FindingQuery:
    project: str | None = None
    run_id: int | None = None
    severity: str | None = None
    min_severity: str | None = None
    kind: str | None = None
    since: datetime | None = None


def search_findings(
    *, session: Session, query: FindingQuery, limit: int, offset: int
) -> tuple[list[tuple[Finding, str, str]], int]:
    """Findings across runs with their project and run names, newest first, and the total."""
    stmt = (
        select(Finding, Project.name, Run.name)
        .join(Run, Finding.run_id == Run.id)
        .join(Project, Run.project_id == Project.id)
    )
    if query.project is not None:
        stmt = stmt.where(Project.name == query.project)
    if query.run_id is not None:
        stmt = stmt.where(Finding.run_id == query.run_id)
    if query.severity:
        stmt = stmt.where(Finding.severity == query.severity)
    if query.min_severity:
        floor = SEVERITY_RANK[query.min_severity]
        stmt = stmt.where(Finding.severity.in_([s for s, r in SEVERITY_RANK.items() if r >= floor]))
    if query.kind:
        stmt = stmt.where(Finding.kind == query.kind)
    if query.since is not None:
        stmt = stmt.where(Finding.created_at >= query.since)
    total = session.scalar(select(func.count()).select_from(stmt.subquery())) or 0
    rows = session.execute(
        stmt.order_by(Finding.created_at.desc(), Finding.id.desc()).limit(limit).offset(offset)
    ).all()
    return [(f, p, r) for f, p, r in rows], int(total)


def finding_dict(finding: Finding) -> dict[str, Any]:
    return {
        "kind": finding.kind,
        "severity": finding.severity,
        "step": finding.step,
        "step_end": finding.step_end,
        "resume_from_step": finding.resume_from_step,
        "segment": finding.segment,
        "message": finding.message,
        "evidence": finding.evidence or {},
    }


def verdict_summary(*, session: Session, run: Run) -> dict[str, Any]:
    """Everything CI needs in one object: the verdict, suspect resumes, checkpoint verdicts."""
    findings = list_findings(session=session, run_id=run.id)
    counts = {"critical": 0, "warning": 0, "info": 0}
    for finding in findings:
        counts[finding.severity] = counts.get(finding.severity, 0) + 1
    suspects: dict[int | None, dict[str, Any]] = {}
    for finding in findings:
        if finding.resume_from_step is None or finding.severity == "info":
            continue
        entry = suspects.setdefault(
            finding.resume_from_step,
            {"resume_from_step": finding.resume_from_step, "findings": [], "repair": None},
        )
        entry["findings"].append(
            {"kind": finding.kind, "severity": finding.severity, "message": finding.message}
        )
        repair = (finding.evidence or {}).get("repair")
        if repair:
            entry["repair"] = repair
    checkpoints = session.execute(
        select(Checkpoint.name, Checkpoint.step, Checkpoint.verdict, Checkpoint.verdict_reasons)
        .where(Checkpoint.run_id == run.id)
        .order_by(Checkpoint.step)
    )
    return {
        "run_id": run.id,
        "verdict": run.verdict,
        "analyzed_at": run.analyzed_at,
        "counts": counts,
        "suspect_resumes": list(suspects.values()),
        "checkpoints": [
            {
                "name": c.name,
                "step": c.step,
                "verdict": c.verdict,
                "reasons": c.verdict_reasons or [],
            }
            for c in checkpoints
        ],
    }

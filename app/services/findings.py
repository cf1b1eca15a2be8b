"""Reading analysis results: a run's findings, its verdict, and its checkpoints' verdicts."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models import Checkpoint, Finding, Run


def list_findings(
    *, session: Session, run_id: int, severity: str | None = None, kind: str | None = None
) -> list[Finding]:
    query = select(Finding).where(Finding.run_id == run_id)
    if severity:
        query = query.where(Finding.severity == severity)
    if kind:
        query = query.where(Finding.kind == kind)
    return list(session.scalars(query.order_by(Finding.step, Finding.id)))


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
    checkpoints = session.scalars(
        select(Checkpoint).where(Checkpoint.run_id == run.id).order_by(Checkpoint.step)
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

"""Runs every analyzer, folds findings that share one cause, and derives the verdict, a
per-checkpoint verdict and repair advice for each suspect resume."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.analysis.coverage import Coverage, CoverageMap
from app.analysis.coverage_grid import coverage_grid
from app.analysis.drift import analyze_drift
from app.analysis.epochs import EpochPlan, plan_epochs
from app.analysis.findings import (
    CRITICAL,
    INCOMPLETE_CHECKPOINT,
    INFO,
    LR_DISCONTINUITY,
    RESUME_DATA_DRIFT,
    RESUME_LOSS_SPIKE,
    RESUME_OK,
    RESUME_ORDER_DIVERGENCE,
    SEVERITY_RANK,
    STATE_NOT_RESTORED,
    WARNING,
    Finding,
    fmt_int,
    verdict_of,
)
from app.analysis.gpu_faults import analyze_gpu_faults
from app.analysis.lr import analyze_lr
from app.analysis.model import CheckpointInfo, RunData, SegmentInfo
from app.analysis.order import analyze_order
from app.analysis.spikes import analyze_spikes
from app.analysis.stalls import analyze_stalls
from app.analysis.state import analyze_state, missing_components

STATE_KINDS = (INCOMPLETE_CHECKPOINT, STATE_NOT_RESTORED)
DATA_KINDS = (RESUME_DATA_DRIFT, RESUME_ORDER_DIVERGENCE)


@dataclass
class CheckpointVerdict:
    name: str
    step: int
    safe: bool
    reasons: list[str] = field(default_factory=list)


@dataclass
class AnalysisReport:
    findings: list[Finding]
    verdict: str
    checkpoints: list[CheckpointVerdict]
    epoch_plan: dict[str, Any] | None = None
    sampler: str | None = None
    coverage: dict[str, Any] | None = None  # the heatmap grid, for the dashboard


def analyze_run(run: RunData, coverage: Coverage | None = None) -> AnalysisReport:
    """Every analyzer on ``run``. ``coverage``, when given, is the trace's coverage already
    counted elsewhere (merged from per-epoch summaries), and its plan is the run's plan."""
    if coverage is not None:
        plan: EpochPlan | None = coverage.plan
    else:
        plan = plan_epochs(run)
        if plan is not None and run.trace is not None and run.trace.size:
            coverage = CoverageMap(run.trace, plan)
    order = analyze_order(run, plan, coverage)
    findings = [
        *analyze_state(run),
        *analyze_drift(run, plan, coverage),
        *order.findings,
        *analyze_lr(run),
        *analyze_spikes(run),
        *analyze_stalls(run),
        *analyze_gpu_faults(run),
    ]
    findings = _consolidate(findings, run)
    for finding in findings:
        if finding.kind == RESUME_DATA_DRIFT and finding.segment in order.per_resume:
            finding.evidence.setdefault("order", order.per_resume[finding.segment])
    findings.extend(_resume_ok(run, findings, order.per_resume))
    suspects = _suspects(findings)
    for ordinal, primary in suspects.items():
        advice = repair_advice(run, plan, _segment(run, ordinal), suspects)
        if advice is not None:
            primary.evidence["repair"] = advice
    findings.sort(key=lambda f: (f.step if f.step is not None else -1, -SEVERITY_RANK[f.severity]))
    return AnalysisReport(
        findings=findings,
        verdict=verdict_of(findings),
        checkpoints=checkpoint_verdicts(run, suspects),
        epoch_plan=None
        if plan is None
        else {
            "dataset_size": plan.dataset_size,
            "global_batch_size": plan.global_batch_size,
            "steps_per_epoch": plan.steps_per_epoch,
            "source": plan.source,
        },
        sampler=order.design.describe() if order.design is not None else None,
        coverage=coverage_grid(coverage).to_dict() if coverage is not None else None,
    )


def _segment(run: RunData, ordinal: int) -> SegmentInfo:
    return next(s for s in run.segments if s.ordinal == ordinal)


def _consolidate(findings: list[Finding], run: RunData) -> list[Finding]:
    """Fold findings that one cause explains into the finding that shows its consequence."""
    drop: set[int] = set()
    by_segment: dict[int, list[Finding]] = {}
    for finding in findings:
        if finding.segment is not None:
            by_segment.setdefault(finding.segment, []).append(finding)
    for group in by_segment.values():
        data = next((f for f in group if f.kind == RESUME_DATA_DRIFT), None) or next(
            (f for f in group if f.kind == RESUME_ORDER_DIVERGENCE), None
        )
        lr = next((f for f in group if f.kind == LR_DISCONTINUITY), None)
        for finding in group:
            if finding.kind == RESUME_ORDER_DIVERGENCE and data is not None and finding is not data:
                data.evidence["order"] = finding.evidence
                drop.add(id(finding))
            elif finding.kind in STATE_KINDS:
                parts = set(
                    finding.evidence.get("missing") or finding.evidence.get("not_restored") or []
                )
                if parts and parts <= {"dataloader"} and data is not None:
                    data.evidence["cause"] = finding.message
                    drop.add(id(finding))
                elif parts and parts <= {"scheduler"} and lr is not None:
                    lr.evidence["cause"] = finding.message
                    drop.add(id(finding))
                elif parts and parts <= {"dataloader", "scheduler"} and data is None:
                    _downgrade_if_verified(finding, run, lr)
        primary = max(
            (f for f in group if id(f) not in drop and f.kind != RESUME_LOSS_SPIKE),
            key=lambda f: SEVERITY_RANK[f.severity],
            default=None,
        )
        for finding in group:
            if (
                finding.kind == RESUME_LOSS_SPIKE
                and primary is not None
                and primary.severity != INFO
            ):
                primary.evidence["loss_spike"] = finding.evidence
                drop.add(id(finding))
    return [f for f in findings if id(f) not in drop]


def _downgrade_if_verified(finding: Finding, run: RunData, lr: Finding | None) -> None:
    """Loader or scheduler state left out, but the trace / LR curve show no consequence."""
    parts = set(finding.evidence.get("missing") or finding.evidence.get("not_restored") or [])
    verified = []
    if "dataloader" in parts:
        if run.trace is None or not run.trace.size:
            return
        verified.append("the sample trace shows the data continued as designed")
    if "scheduler" in parts:
        if lr is not None or run.metric("lr") is None:
            return
        verified.append("the LR continued on its schedule")
    finding.severity = INFO
    finding.message = finding.message.rstrip(".") + ", but " + " and ".join(verified) + "."


def _suspects(findings: list[Finding]) -> dict[int, Finding]:
    """The most severe warning/critical finding of each suspect resume, by segment."""
    out: dict[int, Finding] = {}
    for finding in findings:
        if finding.segment is None or finding.severity == INFO:
            continue
        current = out.get(finding.segment)
        if current is None or SEVERITY_RANK[finding.severity] > SEVERITY_RANK[current.severity]:
            out[finding.segment] = finding
    return out


def _resume_ok(
    run: RunData, findings: list[Finding], order: dict[int, dict[str, Any]]
) -> list[Finding]:
    flagged = {f.segment for f in findings if f.segment is not None and f.severity != INFO}
    out = []
    for resume in run.resumes:
        if resume.ordinal in flagged:
            continue
        checks = []
        evidence: dict[str, Any] = dict(order.get(resume.ordinal, {}))
        replay = evidence.get("replayed_steps")
        if replay and evidence.get("replay_divergence_step") is None:
            checks.append(
                f"replayed steps {replay[0]}-{replay[1]} consumed the same samples as before"
            )
        if run.trace is not None and run.trace.size:
            checks.append("later epochs covered the dataset as designed")
        if run.metric("lr") is not None:
            checks.append("the LR continued on its schedule")
        if resume.restored is not None:
            checks.append(f"it restored {', '.join(resume.restored)}")
        detail = "; ".join(checks) if checks else "no problem found"
        evidence["restored"] = resume.restored
        evidence["checkpoint"] = resume.checkpoint
        out.append(
            Finding(
                kind=RESUME_OK,
                severity=INFO,
                message=f"Resume from step {resume.resume_step} checked out: {detail}.",
                step=(resume.resume_step or 0) + 1,
                resume_from_step=resume.resume_step,
                segment=resume.ordinal,
                evidence=evidence,
            )
        )
    return out


def repair_advice(
    run: RunData, plan: EpochPlan | None, resume: SegmentInfo, suspects: dict[int, Finding]
) -> dict[str, Any] | None:
    """The last trustworthy checkpoint before a suspect resume and the loader state that
    restores the designed order from it."""
    limit = resume.resume_step if resume.resume_step is not None else resume.start_step
    if limit is None:
        return None
    tainted_from = _first_taint(run, suspects)
    candidates = [
        c
        for c in run.checkpoints
        if c.step <= limit
        and not missing_components(run, c)
        and (tainted_from is None or c.step <= tainted_from or tainted_from >= limit)
    ]
    if not candidates:
        return {"advice": "No complete checkpoint before this resume: restart from scratch."}
    ckpt = max(candidates, key=lambda c: c.step)
    advice: dict[str, Any] = {"checkpoint": ckpt.name, "step": ckpt.step}
    text = f"Resume from checkpoint {ckpt.name}"
    if plan is not None:
        consumed = _designed_consumed(ckpt, plan)
        epoch, position = plan.position(consumed)
        seed = _run_seed(run)
        advice.update({"consumed_samples": consumed, "epoch": epoch, "position": position})
        text += f" with epoch {epoch}, position {fmt_int(position)}"
        if seed is not None:
            advice["seed"] = seed
            text += f", seed {seed}"
    primary = suspects.get(resume.ordinal)
    needs = _restore_hint(primary)
    advice["advice"] = text + (f", and {needs}" if needs else "") + "."
    return advice


def _first_taint(run: RunData, suspects: dict[int, Finding]) -> int | None:
    steps = [
        s.resume_step for s in run.resumes if s.ordinal in suspects and s.resume_step is not None
    ]
    return min(steps) if steps else None


def _designed_consumed(ckpt: CheckpointInfo, plan: EpochPlan) -> int:
    designed = ckpt.step * plan.global_batch_size
    if ckpt.consumed_samples is not None and ckpt.consumed_samples == designed:
        return ckpt.consumed_samples
    return designed


def _run_seed(run: RunData) -> int | None:
    sampler = run.config.get("sampler")
    if isinstance(sampler, dict) and type(sampler.get("seed")) is int:
        return int(sampler["seed"])
    first_resume = min((s.start_step or 0 for s in run.resumes), default=None)
    seeds = [
        c.seed
        for c in run.checkpoints
        if c.seed is not None and (first_resume is None or c.step <= first_resume)
    ]
    return seeds[0] if seeds else None


def _restore_hint(primary: Finding | None) -> str:
    if primary is None:
        return ""
    if primary.kind == LR_DISCONTINUITY:
        return "restore its scheduler state"
    parts = primary.evidence.get("missing") or primary.evidence.get("not_restored") or []
    if primary.kind in STATE_KINDS and parts:
        return f"restore its {', '.join(parts)} state"
    if primary.kind in DATA_KINDS:
        return "restore the loader to that position"
    return ""


def checkpoint_verdicts(run: RunData, suspects: dict[int, Finding]) -> list[CheckpointVerdict]:
    """Is each checkpoint safe to resume from or promote, and if not, why."""
    taints = sorted(
        (
            (s.resume_step, suspects[s.ordinal])
            for s in run.resumes
            if s.ordinal in suspects and s.resume_step is not None
        ),
        key=lambda taint: taint[0],  # two resumes from one step: in resume order
    )
    out = []
    for ckpt in run.checkpoints:
        reasons = [f"lacks {c} state" for c in missing_components(run, ckpt)]
        for step, finding in taints:
            if ckpt.step > step:
                reasons.append(f"saved after the suspect resume from step {step} ({finding.kind})")
                break
        out.append(CheckpointVerdict(ckpt.name, ckpt.step, safe=not reasons, reasons=reasons))
    return out


__all__ = ["CRITICAL", "WARNING", "AnalysisReport", "CheckpointVerdict", "analyze_run"]

"""Resumable state: checkpoints missing what an exact resume needs, and resumes that left out
something the checkpoint had."""

from __future__ import annotations

from app.analysis.findings import (
    CRITICAL,
    INCOMPLETE_CHECKPOINT,
    STATE_NOT_RESTORED,
    WARNING,
    Finding,
)
from app.analysis.model import CheckpointInfo, RunData, SegmentInfo

# Without these a resume cannot continue exactly; the rest show up as LR or noise changes.
CRITICAL_COMPONENTS = ("model", "optimizer", "dataloader")


def required_components(run: RunData) -> tuple[str, ...]:
    needed = ["model", "optimizer", "scheduler", "rng", "dataloader"]
    if run.metric("loss_scale") is not None or _uses_amp(run):
        needed.append("scaler")
    return tuple(needed)


def missing_components(run: RunData, ckpt: CheckpointInfo) -> list[str]:
    """Components an exact resume from ``ckpt`` needs that it does not hold. A stateless sampler
    resumes from the consumed-sample count, so a recorded count stands in for loader state."""
    if not ckpt.components:
        return []  # the manifest does not list components: nothing to judge
    missing = [c for c in required_components(run) if c not in ckpt.components]
    if "dataloader" in missing and ckpt.consumed_samples is not None:
        missing.remove("dataloader")
    return missing


def severity_of(components: list[str]) -> str:
    return CRITICAL if any(c in CRITICAL_COMPONENTS for c in components) else WARNING


def analyze_state(run: RunData) -> list[Finding]:
    findings: list[Finding] = []
    by_name = {c.name: c for c in run.checkpoints}
    used: set[str] = set()
    for resume in run.resumes:
        ckpt = by_name.get(resume.checkpoint or "")
        if ckpt is None:
            continue
        used.add(ckpt.name)
        missing = missing_components(run, ckpt)
        if missing:
            findings.append(_incomplete_at_resume(run, resume, ckpt, missing))
        not_restored = _not_restored(resume, ckpt)
        if not_restored:
            findings.append(_not_restored_finding(resume, ckpt, not_restored))
    unused = [c for c in run.checkpoints if c.name not in used and missing_components(run, c)]
    if unused and not any(f.kind == INCOMPLETE_CHECKPOINT for f in findings):
        findings.append(_incomplete_unused(run, unused))
    return findings


def _not_restored(resume: SegmentInfo, ckpt: CheckpointInfo) -> list[str]:
    if resume.restored is None:
        return []
    restored = {c.lower() for c in resume.restored}
    return sorted(c for c in ckpt.components if c not in restored)


def _incomplete_at_resume(
    run: RunData, resume: SegmentInfo, ckpt: CheckpointInfo, missing: list[str]
) -> Finding:
    others = [c.name for c in run.checkpoints if missing_components(run, c)]
    also = (
        f" ({len(others)} of {len(run.checkpoints)} checkpoints lack it)" if len(others) > 1 else ""
    )
    names = ", ".join(missing)
    return Finding(
        kind=INCOMPLETE_CHECKPOINT,
        severity=severity_of(missing),
        message=(
            f"Resume from step {resume.resume_step} loaded checkpoint {ckpt.name}, which holds no"
            f" {names} state{also}: training continued from a partial state."
        ),
        step=(resume.resume_step or 0) + 1,
        resume_from_step=resume.resume_step,
        segment=resume.ordinal,
        evidence={
            "checkpoint": ckpt.name,
            "missing": missing,
            "components": sorted(ckpt.components),
            "incomplete_checkpoints": others,
        },
    )


def _not_restored_finding(
    resume: SegmentInfo, ckpt: CheckpointInfo, components: list[str]
) -> Finding:
    names = ", ".join(components)
    return Finding(
        kind=STATE_NOT_RESTORED,
        severity=severity_of(components),
        message=(
            f"Resume from step {resume.resume_step} did not restore the {names} state that"
            f" checkpoint {ckpt.name} holds."
        ),
        step=(resume.resume_step or 0) + 1,
        resume_from_step=resume.resume_step,
        segment=resume.ordinal,
        evidence={
            "checkpoint": ckpt.name,
            "not_restored": components,
            "restored": resume.restored,
            "components": sorted(ckpt.components),
        },
    )


def _incomplete_unused(run: RunData, checkpoints: list[CheckpointInfo]) -> Finding:
    missing = sorted({m for c in checkpoints for m in missing_components(run, c)})
    names = ", ".join(missing)
    return Finding(
        kind=INCOMPLETE_CHECKPOINT,
        severity=WARNING,
        message=(
            f"{len(checkpoints)} of {len(run.checkpoints)} checkpoints hold no {names} state:"
            " resuming from them would not continue training exactly."
        ),
        step=checkpoints[0].step,
        step_end=checkpoints[-1].step,
        evidence={"checkpoints": [c.name for c in checkpoints], "missing": missing},
    )


def _uses_amp(run: RunData) -> bool:
    text = {str(run.config.get(k, "")).lower() for k in ("precision", "mixed_precision", "amp")}
    return bool(text & {"fp16", "16", "16-mixed", "true", "amp"}) or bool(run.config.get("fp16"))

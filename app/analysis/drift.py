"""Resume-induced data drift: after a resume, designed epochs that skip or repeat samples.

Each designed epoch after a resume is compared with what the run's own un-resumed epochs show
(drop_last leaves a few samples out by design). Epochs that repeat samples, or (when no step is
missing from the log) leave more samples out than the baseline, are attributed to the latest
resume before them. Without a sample trace, the data position recorded in the checkpoints saved
after a resume is checked against the design (consumed samples, epoch, position, seed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.analysis.coverage import Coverage, CoverageMap, EpochCoverage
from app.analysis.epochs import EpochPlan
from app.analysis.findings import (
    CRITICAL,
    RESUME_DATA_DRIFT,
    Finding,
    fmt_int,
    index_ranges,
)
from app.analysis.model import CheckpointInfo, RunData, SegmentInfo


@dataclass(frozen=True)
class Baseline:
    unseen: float
    repeated: float
    unseen_tolerance: float
    repeated_tolerance: float
    epochs: tuple[int, ...]


def analyze_drift(
    run: RunData, plan: EpochPlan | None, coverage: Coverage | None = None
) -> list[Finding]:
    if plan is None:
        return []
    resumes = [s for s in run.resumes if s.start_step is not None]
    findings: dict[int, Finding] = {}
    if run.trace is not None and run.trace.size and resumes:
        coverage = coverage or CoverageMap(run.trace, plan)
        for finding in _trace_drift(run, plan, coverage, resumes):
            findings[finding.segment or 0] = finding
    for segment, evidence in _manifest_mismatches(run, plan, resumes).items():
        if segment in findings:
            findings[segment].evidence["manifest"] = evidence
        elif run.trace is None or not run.trace.size:
            findings[segment] = _manifest_finding(run, segment, evidence)
    return [findings[k] for k in sorted(findings)]


def baseline(coverage: Coverage, plan: EpochPlan, first_resume: int | None) -> Baseline:
    """What complete, gap-free epochs before the first resume show."""
    clean = [
        e
        for e in coverage.epochs
        if e.complete and not e.has_gaps and (first_resume is None or e.last_step <= first_resume)
    ]
    if not clean:
        by_design = max(plan.dataset_size - plan.samples_per_epoch, 0)
        return Baseline(float(by_design), 0.0, 2.0, 2.0, ())
    unseen = np.array([e.unseen for e in clean], dtype=float)
    repeated = np.array([e.repeated for e in clean], dtype=float)
    return Baseline(
        unseen=float(np.median(unseen)),
        repeated=float(np.median(repeated)),
        unseen_tolerance=_tolerance(unseen),
        repeated_tolerance=_tolerance(repeated),
        epochs=tuple(e.epoch for e in clean),
    )


def _tolerance(values: np.ndarray) -> float:
    mad = float(np.median(np.abs(values - np.median(values))))
    return max(2.0, 5.0 * 1.4826 * mad + 3.0 * float(np.sqrt(np.median(values))))


def drifting(epoch: EpochCoverage, base: Baseline) -> bool:
    if epoch.repeated - base.repeated > base.repeated_tolerance:
        return True
    return (
        epoch.complete and not epoch.has_gaps and epoch.unseen - base.unseen > base.unseen_tolerance
    )


def _trace_drift(
    run: RunData, plan: EpochPlan, coverage: Coverage, resumes: list[SegmentInfo]
) -> list[Finding]:
    first_resume = min(int(s.start_step or 0) for s in resumes)
    base = baseline(coverage, plan, first_resume)
    by_resume: dict[int, list[EpochCoverage]] = {}
    for epoch in coverage.epochs:
        if epoch.last_step <= first_resume or not drifting(epoch, base):
            continue
        cause = _latest_resume_before(resumes, epoch.last_step)
        if cause is not None:
            by_resume.setdefault(cause.ordinal, []).append(epoch)
    design_unseen = _ids_unseen_in_every_epoch(coverage, base.epochs)
    return [
        _trace_finding(run, plan, coverage, base, design_unseen, _segment(run, ordinal), epochs)
        for ordinal, epochs in sorted(by_resume.items())
    ]


def _latest_resume_before(resumes: list[SegmentInfo], step: int) -> SegmentInfo | None:
    before = [s for s in resumes if (s.start_step or 0) < step]
    return before[-1] if before else None


def _segment(run: RunData, ordinal: int) -> SegmentInfo:
    return next(s for s in run.segments if s.ordinal == ordinal)


def _ids_unseen_in_every_epoch(coverage: Coverage, epochs: tuple[int, ...]) -> np.ndarray:
    """Mask of ids left out of every baseline epoch: left out by design (a sequential
    sampler's drop_last tail)."""
    never = np.zeros(coverage.plan.dataset_size, dtype=bool)
    if epochs:
        never[:] = True
        for epoch in epochs:
            never &= coverage.unseen_mask(epoch)
    return never


def _trace_finding(
    run: RunData,
    plan: EpochPlan,
    coverage: Coverage,
    base: Baseline,
    design_unseen: np.ndarray,
    resume: SegmentInfo,
    epochs: list[EpochCoverage],
) -> Finding:
    per_epoch = []
    unseen_total = repeated_total = 0
    first = epochs[0]
    skipped_mask = coverage.unseen_mask(first.epoch) & ~design_unseen
    skipped = np.flatnonzero(skipped_mask)
    repeated = coverage.repeated_ids(first.epoch)
    same_head = True
    # unseen per epoch beyond the ids every baseline epoch left out
    by_design = base.unseen - int(np.count_nonzero(design_unseen))
    for epoch in epochs:
        unseen_mask = coverage.unseen_mask(epoch.epoch) & ~design_unseen
        outside_design = int(np.count_nonzero(unseen_mask))
        unseen_excess = max(round(outside_design - by_design), 0)
        repeated_excess = max(round(epoch.repeated - base.repeated), 0)
        unseen_total += unseen_excess
        repeated_total += repeated_excess
        per_epoch.append(
            {
                "epoch": epoch.epoch,
                "steps": [epoch.first_step, epoch.last_step],
                "unseen": epoch.unseen,
                "repeated": epoch.repeated,
                "extra_consumptions": epoch.extra,
                "unseen_beyond_design": unseen_excess,
                "repeated_beyond_design": repeated_excess,
            }
        )
        if epoch is not first and same_head:
            same_head = bool(np.array_equal(unseen_mask, skipped_mask))
    r = resume.resume_step
    cause = _cause(resume, same_head and len(epochs) > 1)
    n = fmt_int(plan.dataset_size)
    if len(epochs) == 1:
        where = (
            f"in epoch {first.epoch}, {fmt_int(unseen_total)} of {n} samples were never seen"
            f" and {fmt_int(repeated_total)} were seen more than once"
        )
    else:
        k = len(epochs)
        where = (
            f"in {k} epochs ({epochs[0].epoch}-{epochs[-1].epoch}), about"
            f" {fmt_int(unseen_total // k)} of {n} samples per epoch were never seen and"
            f" {fmt_int(repeated_total // k)} were seen more than once"
            f" ({fmt_int(unseen_total)} and {fmt_int(repeated_total)} in all)"
        )
    return Finding(
        kind=RESUME_DATA_DRIFT,
        severity=CRITICAL,
        message=f"Resume from step {r} {cause}: {where}.",
        step=first.first_step if r is None else r + 1,
        step_end=epochs[-1].last_step,
        resume_from_step=r,
        segment=resume.ordinal,
        evidence={
            "dataset_size": plan.dataset_size,
            "samples_per_epoch": plan.samples_per_epoch,
            "steps_per_epoch": plan.steps_per_epoch,
            "global_batch_size": plan.global_batch_size,
            "epoch_plan_source": plan.source,
            "baseline": {
                "epochs": list(base.epochs),
                "unseen_per_epoch": base.unseen,
                "repeated_per_epoch": base.repeated,
            },
            "affected_epochs": [e.epoch for e in epochs],
            "epochs": per_epoch,
            "samples_never_seen": unseen_total,
            "samples_repeated": repeated_total,
            "skipped_ranges": index_ranges(skipped),
            "repeated_ranges": index_ranges(repeated),
            "restored": resume.restored,
        },
    )


def _cause(resume: SegmentInfo, same_head_every_epoch: bool) -> str:
    if same_head_every_epoch:
        return "re-applied its resume offset in every later epoch"
    if resume.restored is not None and "dataloader" not in resume.restored:
        return "did not restore the data loader state"
    return "lost the data position"


def _manifest_mismatches(
    run: RunData, plan: EpochPlan, resumes: list[SegmentInfo]
) -> dict[int, dict[str, object]]:
    """Per resume: the first later checkpoint whose recorded data position breaks the design."""
    first_resume = min((int(s.start_step or 0) for s in resumes), default=None)
    ordered = sorted(run.checkpoints, key=lambda c: c.step)
    before = [c for c in ordered if first_resume is None or c.step <= first_resume]
    if not before:
        return {}
    seed = _seed(before)
    previous: CheckpointInfo | None = None
    for ckpt in before:
        if _mismatch(ckpt, plan, seed, _expected_consumed(previous, ckpt, plan)):
            return {}  # the run's own un-resumed manifests do not follow this design
        previous = ckpt
    by_step = {c.step: c for c in ordered}
    out: dict[int, dict[str, object]] = {}
    for resume in resumes:
        anchor = by_step.get(resume.resume_step) if resume.resume_step is not None else None
        if anchor is None:
            continue
        nxt = _next_segment_start(run, resume)
        for ckpt in ordered:
            if ckpt.step <= anchor.step or (nxt is not None and ckpt.step > nxt):
                continue
            problem = _mismatch(ckpt, plan, seed, _expected_consumed(anchor, ckpt, plan))
            if problem:
                out[resume.ordinal] = {"checkpoint": ckpt.name, "step": ckpt.step, **problem}
                break
            anchor = ckpt
    return out


def _expected_consumed(
    previous: CheckpointInfo | None, ckpt: CheckpointInfo, plan: EpochPlan
) -> int | None:
    if previous is None:
        return ckpt.step * plan.global_batch_size
    if previous.consumed_samples is None:
        return None
    return previous.consumed_samples + (ckpt.step - previous.step) * plan.global_batch_size


def _seed(checkpoints: list[CheckpointInfo]) -> int | None:
    seeds = {c.seed for c in checkpoints if c.seed is not None}
    return seeds.pop() if len(seeds) == 1 else None


def _next_segment_start(run: RunData, resume: SegmentInfo) -> int | None:
    later = [s.start_step for s in run.segments if s.ordinal > resume.ordinal]
    return later[0] if later and later[0] is not None else None


def _mismatch(
    ckpt: CheckpointInfo, plan: EpochPlan, seed: int | None, expected_consumed: int | None
) -> dict[str, object]:
    problems: dict[str, object] = {}
    recorded = ckpt.consumed_samples
    if recorded is not None and expected_consumed is not None and recorded != expected_consumed:
        problems["consumed_samples"] = {"recorded": recorded, "designed": expected_consumed}
    consumed = recorded if recorded is not None else expected_consumed
    if consumed is None:
        return problems
    epoch, position = plan.position(consumed)
    recorded_position = (ckpt.epoch, ckpt.consumed_in_epoch)
    if None not in recorded_position and recorded_position != (epoch, position):
        problems["position"] = {
            "recorded": [ckpt.epoch, ckpt.consumed_in_epoch],
            "designed": [epoch, position],
        }
    if seed is not None and ckpt.seed is not None and ckpt.seed != seed:
        problems["seed"] = {"recorded": ckpt.seed, "designed": seed}
    return problems


def _manifest_finding(run: RunData, ordinal: int, evidence: dict[str, object]) -> Finding:
    resume = _segment(run, ordinal)
    parts = []
    position = evidence.get("position")
    if isinstance(position, dict):
        (re, rp), (de, dp) = position["recorded"], position["designed"]
        parts.append(
            f"epoch {re}, position {fmt_int(rp)} where the design is epoch {de},"
            f" position {fmt_int(dp)}"
        )
    seed = evidence.get("seed")
    if isinstance(seed, dict):
        parts.append(f"seed {seed['recorded']} instead of {seed['designed']}")
    consumed = evidence.get("consumed_samples")
    if isinstance(consumed, dict):
        parts.append(
            f"{fmt_int(int(consumed['recorded']))} consumed samples instead of"
            f" {fmt_int(int(consumed['designed']))}"
        )
    return Finding(
        kind=RESUME_DATA_DRIFT,
        severity=CRITICAL,
        message=(
            f"Resume from step {resume.resume_step} lost the data position: checkpoint"
            f" {evidence['checkpoint']} records {'; '.join(parts)}."
        ),
        step=(resume.resume_step or 0) + 1,
        step_end=int(str(evidence["step"])),
        resume_from_step=resume.resume_step,
        segment=ordinal,
        evidence={"manifest": evidence, "restored": resume.restored},
    )

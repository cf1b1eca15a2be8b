"""Data order across a resume: replayed steps, the designed sampler order, repeated permutations.

Three checks per resume: (1) steps that ran twice (before the crash and after the resume) must
consume the same samples; (2) where the sampler is declared or recognised, the trace must follow
its designed order after the resume; (3) epochs after a resume must not replay an earlier epoch's
permutation when the run's un-resumed epochs were shuffled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np

from app.analysis.coverage import ORDER_HEAD, Coverage, CoverageMap
from app.analysis.epochs import EpochPlan
from app.analysis.findings import RESUME_ORDER_DIVERGENCE, WARNING, Finding
from app.analysis.model import RunData, SegmentInfo, Trace
from app.analysis.samplers import SamplerDesign, find_design, first_divergence

SAME_ORDER = 0.5  # fraction of equal positions above which two epochs share a permutation


@dataclass
class OrderReport:
    findings: list[Finding] = field(default_factory=list)
    design: SamplerDesign | None = None
    per_resume: dict[int, dict[str, Any]] = field(default_factory=dict)


def analyze_order(
    run: RunData, plan: EpochPlan | None, coverage: Coverage | None = None
) -> OrderReport:
    report = OrderReport()
    trace = run.trace
    resumes = [s for s in run.resumes if s.start_step is not None]
    if trace is None or not trace.size or plan is None or not resumes:
        return report
    design = find_design(run, plan)
    if design is not None and not _design_holds_before(design, trace, plan, resumes):
        design = None
    report.design = design
    for resume in resumes:
        evidence: dict[str, Any] = {}
        evidence.update(_replay_check(run, resume))
        if design is not None:
            evidence["design"] = design.describe()
            evidence["design_divergence_step"] = _design_check(design, trace, plan, run, resume)
        report.per_resume[resume.ordinal] = evidence
    repeats = _repeated_epochs(run, plan, resumes, coverage or CoverageMap(trace, plan))
    for ordinal, items in repeats.items():
        report.per_resume[ordinal]["repeated_epochs"] = items
    for resume in resumes:
        finding = _finding(resume, report.per_resume[resume.ordinal])
        if finding is not None:
            report.findings.append(finding)
    return report


def _design_holds_before(
    design: SamplerDesign, trace: Trace, plan: EpochPlan, resumes: list[SegmentInfo]
) -> bool:
    first_resume = min(int(s.start_step or 0) for s in resumes)
    last = min(first_resume, int(plan.steps_per_epoch * 2))
    return first_divergence(design, trace, plan, 1, last) is None


def _replay_check(run: RunData, resume: SegmentInfo) -> dict[str, Any]:
    """Compare the ids of steps that the previous process ran and this one ran again."""
    replayed, trace = run.replayed_trace, run.trace
    if replayed is None or trace is None or not replayed.size:
        return {}
    rows = np.flatnonzero(
        (replayed.segments == resume.ordinal - 1) & (replayed.steps > (resume.start_step or 0))
    )
    if rows.size == 0:
        return {}
    old_offsets, new_offsets = replayed.offsets, trace.offsets
    identical = 0
    first_diff: int | None = None
    for row in rows.tolist():
        step = int(replayed.steps[row])
        at = int(np.searchsorted(trace.steps, step))
        if at >= trace.size or int(trace.steps[at]) != step:
            continue
        old = replayed.id_slice(int(old_offsets[row]), int(old_offsets[row + 1]))
        new = trace.id_slice(int(new_offsets[at]), int(new_offsets[at + 1]))
        if np.array_equal(np.sort(old), np.sort(new)):
            identical += 1
        elif first_diff is None:
            first_diff = step
    steps = replayed.steps[rows]
    return {
        "replayed_steps": [int(steps.min()), int(steps.max())],
        "replayed_count": int(rows.size),
        "replayed_identical": identical,
        "replay_divergence_step": first_diff,
    }


def _design_check(
    design: SamplerDesign, trace: Trace, plan: EpochPlan, run: RunData, resume: SegmentInfo
) -> int | None:
    start = (resume.start_step or 0) + 1
    later = [s.start_step for s in run.segments if s.ordinal > resume.ordinal and s.start_step]
    end = min([start + int(3 * plan.steps_per_epoch), *later])
    return first_divergence(design, trace, plan, start, end)


def _repeated_epochs(
    run: RunData, plan: EpochPlan, resumes: list[SegmentInfo], coverage: Coverage
) -> dict[int, list[dict[str, Any]]]:
    """Epochs after a resume whose order equals an earlier epoch's, by resume ordinal."""
    full = plan.samples_per_epoch
    orders = [
        e.epoch for e in coverage.epochs if e.complete and not e.has_gaps and e.samples == full
    ]
    first_resume = min(int(s.start_step or 0) for s in resumes)
    before = [e for e in orders if plan.window(e)[1] <= first_resume]
    if len(before) >= 2:
        if any(_match_fraction(coverage, a, b, full) > SAME_ORDER for a, b in pairwise(before)):
            return {}  # un-resumed epochs share one order: fixed order by design
    elif _declared_unshuffled(run):
        return {}
    out: dict[int, list[dict[str, Any]]] = {}
    for epoch in orders:
        first_step = plan.window(epoch)[0]
        cause = [s for s in resumes if (s.start_step or 0) < first_step]
        if not cause:
            continue
        for earlier in orders:
            if earlier >= epoch:
                break
            fraction = _match_fraction(coverage, epoch, earlier, full)
            if fraction > SAME_ORDER:
                out.setdefault(cause[-1].ordinal, []).append(
                    {"epoch": epoch, "same_order_as": earlier, "match": round(fraction, 4)}
                )
                break
    return out


def _declared_unshuffled(run: RunData) -> bool:
    flags = {c.shuffle for c in run.checkpoints if c.shuffle is not None}
    sampler = run.config.get("sampler")
    if isinstance(sampler, dict) and sampler.get("kind") == "sequential":
        return True
    return flags == {False}


def _match_fraction(coverage: Coverage, a: int, b: int, n: int) -> float:
    """Share of the first ``n`` positions where epochs ``a`` and ``b`` consumed the same id.
    The leading ``ORDER_HEAD`` positions decide unless they look alike; only then are the
    whole orders read."""
    if n == 0:
        return 0.0
    head = min(n, ORDER_HEAD)
    quick = float(np.mean(coverage.order_head(a)[:head] == coverage.order_head(b)[:head]))
    if quick <= SAME_ORDER or head == n:
        return quick
    return float(np.mean(coverage.ids(a)[:n] == coverage.ids(b)[:n]))


def _finding(resume: SegmentInfo, evidence: dict[str, Any]) -> Finding | None:
    r = resume.resume_step
    repeats = evidence.get("repeated_epochs")
    if repeats:
        epochs = [item["epoch"] for item in repeats]
        sources = sorted({item["same_order_as"] for item in repeats})
        span = f"epoch {epochs[0]}" if len(epochs) == 1 else f"epochs {epochs[0]}-{epochs[-1]}"
        source = ", ".join(f"epoch {s}" for s in sources)
        return Finding(
            kind=RESUME_ORDER_DIVERGENCE,
            severity=WARNING,
            message=(
                f"After the resume from step {r} the data order repeats: {span} replay the"
                f" permutation of {source} (is the sampler's epoch set after the resume?)."
            ),
            step=(r or 0) + 1,
            resume_from_step=r,
            segment=resume.ordinal,
            evidence=evidence,
        )
    diverged = [
        s
        for s in (evidence.get("replay_divergence_step"), evidence.get("design_divergence_step"))
        if s is not None
    ]
    if not diverged:
        return None
    step = min(diverged)
    against = (
        f"the designed order ({evidence['design']})"
        if evidence.get("design_divergence_step") == step
        else "what the same step consumed before the crash"
    )
    return Finding(
        kind=RESUME_ORDER_DIVERGENCE,
        severity=WARNING,
        message=(
            f"Resume from step {r} changed the data order: from step {step} the samples differ"
            f" from {against}."
        ),
        step=step,
        resume_from_step=r,
        segment=resume.ordinal,
        evidence=evidence,
    )

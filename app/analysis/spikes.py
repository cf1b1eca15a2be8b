"""Loss and grad-norm spikes, step gaps after saves, and what each spike is attributed to.

Scores are robust z-scores of log(value) against a trailing window (median and MAD), so a
spike's size is judged against the run's own recent noise. A save stalls training when steps
go missing from the log right after it (the loop kept consuming batches and piling up
gradients): its first logged points are checked with a lower threshold, because the gap is
evidence, and a spike there is a checkpoint spike. A save without a stall does not change the
training state, so a spike after it is not blamed on it (it is reported, unattributed, with the
save named). A spike in the first points after a resume is a resume spike.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from app.analysis.findings import (
    CHECKPOINT_LOSS_SPIKE,
    INFO,
    LOSS_SPIKE,
    RESUME_LOSS_SPIKE,
    STEP_GAP,
    WARNING,
    Finding,
    fmt_int,
)
from app.analysis.model import CheckpointInfo, RunData, Series

WINDOW = 25  # trailing points for the median and MAD
MIN_HISTORY = 8
# A spike is z >= SPIKE_Z at >= MIN_RATIO times the recent median, or a huge jump (>= BIG_RATIO
# times) at z >= BIG_RATIO_Z: bad batches in noisy low-loss phases score a modest z but jump
# 20-1000x. Measured on the labelled corpus (docs/findings.md): no false spike on clean runs.
SPIKE_Z = 7.5
MIN_RATIO = 2.0
BIG_RATIO = 20.0
BIG_RATIO_Z = 4.0
AFTER_GAP_Z = 2.5  # the first points after a stall (a save followed by missing steps)
ATTRIBUTION_POINTS = 2  # a spike counts as "right after" a save or resume within these points
AFTER_GAP_POINTS = 3
METRICS = ("loss", "grad_norm")


@dataclass
class Spike:
    metric: str
    index: int
    step: int
    value: float
    baseline: float
    z: float
    recovery_steps: int | None


def robust_z(values: np.ndarray, window: int = WINDOW) -> np.ndarray:
    """z-score of log(value) against the previous ``window`` points (0 where history is short).

    The spread is the trailing median of absolute deviations from the trailing median: a
    rolling approximation of the MAD that runs in O(n log window).
    """
    with np.errstate(all="ignore"):
        x = pd.Series(np.log(np.where(np.isfinite(values) & (values > 0), values, np.nan)))
    median = x.rolling(window, min_periods=MIN_HISTORY).median().shift(1)
    spread = (x - median).abs().rolling(window, min_periods=MIN_HISTORY).median().shift(1)
    z = ((x - median) / np.maximum(spread * 1.4826, 1e-3)).to_numpy()
    return np.where(np.isfinite(z), z, 0.0)


def analyze_spikes(run: RunData) -> list[Finding]:
    series = {m: run.metric(m) for m in METRICS}
    present = {m: s for m, s in series.items() if s is not None and s.size > MIN_HISTORY}
    if not present:
        return []
    scores = {m: robust_z(s.values) for m, s in present.items()}
    findings: list[Finding] = []
    claimed: set[tuple[str, int]] = set()
    reference = next(iter(present.values()))
    interval = _log_interval(reference.steps)
    for ckpt in run.checkpoints:
        findings.extend(_after_save(run, ckpt, present, scores, interval, claimed))
    for resume in run.resumes:
        if resume.start_step is None:
            continue
        spike = _first_spike(present, scores, resume.start_step, claimed)
        if spike is not None:
            findings.append(_resume_spike(resume.resume_step, resume.ordinal, spike))
    findings.extend(_unattributed(present, scores, claimed, run.checkpoints))
    return findings


def _log_interval(steps: np.ndarray) -> int:
    diffs = np.diff(steps)
    return max(int(np.median(diffs)), 1) if diffs.size else 1


def _after_save(
    run: RunData,
    ckpt: CheckpointInfo,
    present: dict[str, Series],
    scores: dict[str, np.ndarray],
    interval: int,
    claimed: set[tuple[str, int]],
) -> list[Finding]:
    reference = next(iter(present.values()))
    at = int(np.searchsorted(reference.steps, ckpt.step, side="right"))
    if at >= reference.size or at == 0 or int(reference.steps[at - 1]) != ckpt.step:
        return []
    next_step = int(reference.steps[at])
    missing = next_step - ckpt.step - interval
    gap = missing >= interval
    if not gap:
        return []
    spike = _first_spike(present, scores, ckpt.step, claimed, after_gap=True)
    out = [_gap_finding(run, ckpt, next_step, missing)]
    if spike is not None:
        out.append(_checkpoint_spike(ckpt, spike, next_step))
    return out


def is_spike(spike: Spike) -> bool:
    ratio = spike.value / spike.baseline if spike.baseline > 0 else 0.0
    return (spike.z >= SPIKE_Z and ratio >= MIN_RATIO) or (
        spike.z >= BIG_RATIO_Z and ratio >= BIG_RATIO
    )


def _first_spike(
    present: dict[str, Series],
    scores: dict[str, np.ndarray],
    after_step: int,
    claimed: set[tuple[str, int]],
    *,
    after_gap: bool = False,
) -> Spike | None:
    """The strongest spike in the first points after ``after_step``. After a stall the gap is
    itself evidence, so a lower score counts; otherwise it must be a spike anywhere."""
    best: Spike | None = None
    points = AFTER_GAP_POINTS if after_gap else ATTRIBUTION_POINTS
    for metric, series in present.items():
        lo = int(np.searchsorted(series.steps, after_step, side="right"))
        for index in range(lo, min(lo + points, series.size)):
            if (metric, index) in claimed:
                continue
            spike = _spike(metric, series, scores[metric], index)
            if not (spike.z >= AFTER_GAP_Z if after_gap else is_spike(spike)):
                continue
            if best is None or spike.z > best.z:
                best = spike
    if best is not None:
        claimed.add((best.metric, best.index))
        best.recovery_steps = _settled_after(present, scores, best.step)
    return best


def _settled_after(
    present: dict[str, Series], scores: dict[str, np.ndarray], step: int
) -> int | None:
    """Steps after ``step`` until every tracked metric has settled (the slowest one counts)."""
    longest: int | None = None
    for metric, series in present.items():
        index = int(np.searchsorted(series.steps, step))
        if index < series.size:
            steps = _recovery(series, scores[metric], index)
            if steps is not None:
                steps += int(series.steps[index]) - step
                longest = steps if longest is None else max(longest, steps)
    return longest


def _spike(metric: str, series: Series, z: np.ndarray, index: int) -> Spike:
    history = series.values[max(index - WINDOW, 0) : index]
    history = history[np.isfinite(history)]
    baseline = float(np.median(history)) if history.size else float("nan")
    return Spike(
        metric=metric,
        index=index,
        step=int(series.steps[index]),
        value=float(series.values[index]),
        baseline=baseline,
        z=float(z[index]),
        recovery_steps=_recovery(series, z, index),
    )


def _recovery(series: Series, z: np.ndarray, index: int) -> int | None:
    """Logged steps from ``index`` until a 5-point median is back within 1.5x of the median
    of the points before it (None when it never settles within four windows)."""
    history = series.values[max(index - WINDOW, 0) : index]
    history = history[np.isfinite(history)]
    tail = series.values[index + 1 : index + 1 + 4 * WINDOW]
    if history.size < MIN_HISTORY or tail.size < 5:
        return None
    level = float(np.median(history))
    smooth = np.median(np.lib.stride_tricks.sliding_window_view(tail, 5), axis=1)
    calm = np.flatnonzero(smooth <= 1.5 * level)
    if calm.size == 0:
        return None
    return int(series.steps[index + 1 + int(calm[0])] - series.steps[index])


def _unattributed(
    present: dict[str, Series],
    scores: dict[str, np.ndarray],
    claimed: set[tuple[str, int]],
    checkpoints: list[CheckpointInfo],
) -> list[Finding]:
    series = present.get("loss")
    if series is None:
        return []
    z = scores["loss"]
    out = []
    for index in np.flatnonzero(z >= min(SPIKE_Z, BIG_RATIO_Z)).tolist():
        if ("loss", index) in claimed:
            continue
        spike = _spike("loss", series, z, index)
        if not is_spike(spike):
            continue
        before = series.steps[max(index - ATTRIBUTION_POINTS, 0) : index]
        save = next((c for c in checkpoints if c.step in before), None)
        where = (
            f"right after the checkpoint save at step {save.step}, which did not stall training"
            " (no steps missing), so it is not attributed to the save"
            if save is not None
            else "away from any checkpoint stall or resume"
        )
        out.append(
            Finding(
                kind=LOSS_SPIKE,
                severity=INFO,
                message=(
                    f"Loss spike at step {spike.step}: {spike.value:.3g} against a recent median"
                    f" of {spike.baseline:.3g}, {where}."
                ),
                step=spike.step,
                step_end=_end(spike),
                evidence=_spike_evidence(spike),
            )
        )
    return out


def _gap_finding(run: RunData, ckpt: CheckpointInfo, next_step: int, missing: int) -> Finding:
    batch = run.global_batch_size
    consumed = f" ({fmt_int(missing * batch)} samples' worth)" if batch else ""
    seconds = ckpt.save_seconds
    took = f"; the save took {seconds:.1f} s" if seconds is not None else ""
    return Finding(
        kind=STEP_GAP,
        severity=WARNING,
        message=(
            f"Steps {ckpt.step + 1}-{next_step - 1} are missing from the log after the checkpoint"
            f" save at step {ckpt.step}: {fmt_int(missing)} steps{consumed} with no logged"
            f" update{took}."
        ),
        step=ckpt.step,
        step_end=next_step,
        evidence={
            "checkpoint": ckpt.name,
            "missing_steps": [ckpt.step + 1, next_step - 1],
            "missing_count": missing,
            "save_seconds": seconds,
        },
    )


def _checkpoint_spike(ckpt: CheckpointInfo, spike: Spike, next_step: int) -> Finding:
    what = "loss" if spike.metric == "loss" else "grad norm"
    ratio = spike.value / spike.baseline if spike.baseline > 0 else float("inf")
    where = (
        f"just after the checkpoint save at step {ckpt.step} stalled training (steps"
        f" {ckpt.step + 1}-{next_step - 1} missing from the log)"
    )
    settle = spike.recovery_steps
    recovered = f"; it took {settle} step{'s' if settle != 1 else ''} to settle" if settle else ""
    return Finding(
        kind=CHECKPOINT_LOSS_SPIKE,
        severity=WARNING,
        message=f"The {what} jumped {ratio:.1f}x at step {spike.step}, {where}{recovered}.",
        step=ckpt.step,
        step_end=_end(spike),
        evidence={
            "checkpoint": ckpt.name,
            "save_seconds": ckpt.save_seconds,
            **_spike_evidence(spike),
        },
    )


def _resume_spike(resume_step: int | None, ordinal: int, spike: Spike) -> Finding:
    what = "loss" if spike.metric == "loss" else "grad norm"
    ratio = spike.value / spike.baseline if spike.baseline > 0 else float("inf")
    return Finding(
        kind=RESUME_LOSS_SPIKE,
        severity=WARNING,
        message=(
            f"The {what} jumped {ratio:.1f}x at step {spike.step}, right after the resume from"
            f" step {resume_step}."
        ),
        step=spike.step,
        step_end=_end(spike),
        resume_from_step=resume_step,
        segment=ordinal,
        evidence=_spike_evidence(spike),
    )


def _end(spike: Spike) -> int:
    return spike.step + (spike.recovery_steps or 0)


def _spike_evidence(spike: Spike) -> dict[str, object]:
    return {
        "metric": spike.metric,
        "spike_step": spike.step,
        "value": spike.value,
        "recent_median": spike.baseline,
        "robust_z": round(spike.z, 2),
        "recovery_steps": spike.recovery_steps,
    }

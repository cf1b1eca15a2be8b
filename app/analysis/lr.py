"""Learning-rate continuity across each resume.

The first logged LRs after a resume are compared with what the schedule gave before it: the
values the previous process logged for the same steps when they were replayed, or else the
schedule's own shape before the resume. A smooth schedule is extrapolated linearly from its
last points; a piecewise-constant one (StepLR) continues at its level, dropping by its usual
factor at its usual period (a first drop is accepted: only a rise is suspect there).
"""

from __future__ import annotations

import numpy as np

from app.analysis.findings import LR_DISCONTINUITY, WARNING, Finding
from app.analysis.model import RunData, SegmentInfo, Series

FIRST_POINTS = 3
HISTORY = 8
MIN_RELATIVE_JUMP = 0.02


def analyze_lr(run: RunData) -> list[Finding]:
    lr = run.metric("lr")
    if lr is None:
        return []
    replayed = run.replayed_metrics.get("lr")
    findings = []
    for resume in run.resumes:
        finding = _check(lr, replayed, resume)
        if finding is not None:
            findings.append(finding)
    return findings


def _check(lr: Series, replayed: Series | None, resume: SegmentInfo) -> Finding | None:
    start = resume.start_step or 0
    after = np.flatnonzero((lr.segments == resume.ordinal) & (lr.steps > start))[:FIRST_POINTS]
    before = np.flatnonzero((lr.segments < resume.ordinal) & (lr.steps <= start))[-HISTORY:]
    if after.size == 0 or before.size < 2:
        return None
    steps, actual = lr.steps[after], lr.values[after]
    replay = _from_replay(replayed, resume, steps)
    if replay is not None:
        keep, expected = replay
        steps, actual, basis = steps[keep], actual[keep], "the same steps before the crash"
    else:
        history_all = np.flatnonzero((lr.segments < resume.ordinal) & (lr.steps <= start))
        piecewise = _piecewise(lr.steps[history_all], lr.values[history_all], steps, actual)
        if piecewise is _NO_CHECK:
            return None
        if piecewise is not None:
            expected, basis = piecewise, "the step schedule before the resume"
        else:
            expected = _extrapolate(lr.steps[before], lr.values[before], steps)
            basis = "extrapolated"
    scale = np.maximum(np.abs(expected), 1e-12)
    relative = np.abs(actual - expected) / scale
    history = lr.values[before]
    if replay is not None:
        # the same steps logged twice: a correct resume gives the same LR
        allowed = np.full(steps.size, MIN_RELATIVE_JUMP)
    else:
        change = np.abs(np.diff(history)) / np.maximum(np.abs(history[1:]), 1e-12)
        per_step = change / np.maximum(np.diff(lr.steps[before]), 1)
        typical = float(np.median(per_step)) if per_step.size else 0.0
        gaps = (steps - start).astype(float)
        allowed = np.maximum(MIN_RELATIVE_JUMP, 10.0 * typical * gaps)
    if not bool(np.all(relative > allowed)):
        return None
    warmup = _restarted_warmup(lr, resume, float(actual[0]), float(expected[0]))
    r = resume.resume_step
    what = "the schedule restarted its warm-up" if warmup else "the schedule did not continue"
    return Finding(
        kind=LR_DISCONTINUITY,
        severity=WARNING,
        message=(
            f"LR jumped at the resume from step {r}: {float(actual[0]):.3g} at step"
            f" {int(steps[0])} where the schedule gave about {float(expected[0]):.3g}; {what}."
        ),
        step=int(steps[0]),
        resume_from_step=r,
        segment=resume.ordinal,
        evidence={
            "steps": steps.tolist(),
            "lr_after_resume": actual.tolist(),
            "lr_expected": [float(x) for x in expected],
            "relative_error": [round(float(x), 4) for x in relative],
            "expected_from": basis,
            "last_lr_before": float(history[-1]),
            "restarted_warmup": warmup,
            "restored": resume.restored,
        },
    )


def _from_replay(
    replayed: Series | None, resume: SegmentInfo, steps: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """Which of ``steps`` the previous process also logged, and the LR it logged there."""
    if replayed is None or not replayed.size:
        return None
    mine = replayed.segments == resume.ordinal - 1
    keep, values = [], []
    for i, step in enumerate(steps.tolist()):
        hit = np.flatnonzero(mine & (replayed.steps == step))
        if hit.size:
            keep.append(i)
            values.append(float(replayed.values[hit[-1]]))
    if not keep:
        return None
    return np.asarray(keep), np.asarray(values)


_NO_CHECK = np.zeros(0)


def _piecewise(
    steps: np.ndarray, values: np.ndarray, at: np.ndarray, actual: np.ndarray
) -> np.ndarray | None:
    """Expected LRs when the schedule before the resume was piecewise constant; ``None`` when
    it was not; ``_NO_CHECK`` for a plausible first drop that nothing before can confirm."""
    if steps.size < 3:
        return None
    ratios = values[1:] / np.maximum(values[:-1], 1e-30)
    if bool(np.any(np.abs(ratios[-2:] - 1.0) > 1e-6)):
        return None  # still moving at the resume: a smooth schedule
    rises = np.flatnonzero(ratios > 1.0 + 1e-6)
    if rises.size:  # a warm-up: only what came after it describes the decay
        ratios = ratios[rises[-1] + 1 :]
        steps = steps[rises[-1] + 1 :]
    moved = np.flatnonzero(np.abs(ratios - 1.0) > 1e-6)
    if moved.size > max(3, steps.size // 20):
        return None  # a smooth decay
    level = float(values[-1])
    if moved.size == 0:
        return _NO_CHECK if bool(np.all(actual <= level)) else np.full(at.size, level)
    factor = float(np.median(ratios[moved]))
    jumps = steps[moved + 1]
    period = int(np.median(np.diff(jumps))) if jumps.size > 1 else int(jumps[0])
    last_jump = int(jumps[-1])
    drops = np.maximum((at - last_jump) // max(period, 1), 0)
    return level * factor**drops


def _extrapolate(steps: np.ndarray, values: np.ndarray, at: np.ndarray) -> np.ndarray:
    tail = min(4, steps.size)
    slope, intercept = np.polyfit(steps[-tail:].astype(float), values[-tail:], 1)
    return np.asarray(slope * at.astype(float) + intercept)


def _restarted_warmup(lr: Series, resume: SegmentInfo, first: float, expected: float) -> bool:
    mine = np.flatnonzero(lr.segments == resume.ordinal)[:6]
    if mine.size < 3 or first >= expected:
        return False
    return bool(np.all(np.diff(lr.values[mine]) > 0))

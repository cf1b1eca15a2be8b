"""Process lifetimes (segments) of a run and which logged rows belong to which segment.

A training log is appended across restarts, so rows are in file order and a resume shows up as a
step that goes back (replayed steps after a rollback are expected), as a row logged after the
recorded exit step, or as a row stamped after the next process started.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass
class SegmentSpec:
    ordinal: int
    start_step: int | None = None  # optimizer steps already done when the process started
    end_step: int | None = None
    resumed_from: str | None = None
    restored: list[str] | None = None
    started_at: float | None = None
    ended_at: float | None = None
    exit_reason: str | None = None
    source: str = "events"  # "events" or "inferred"
    notes: list[str] = field(default_factory=list)


@dataclass
class LifecycleEvent:
    kind: str  # "process_start" or "process_exit"
    step: int | None
    time: float | None
    resumed_from: str | None = None
    restored: list[str] | None = None
    reason: str | None = None


def segments_from_events(events: Sequence[LifecycleEvent]) -> list[SegmentSpec]:
    """One segment per ``process_start``; each ``process_exit`` closes the open segment."""
    segments: list[SegmentSpec] = []
    for event in events:
        if event.kind == "process_start":
            segments.append(
                SegmentSpec(
                    ordinal=len(segments),
                    start_step=event.step,
                    resumed_from=event.resumed_from,
                    restored=event.restored,
                    started_at=event.time,
                )
            )
        elif event.kind == "process_exit" and segments and segments[-1].exit_reason is None:
            segments[-1].end_step = event.step
            segments[-1].ended_at = event.time
            segments[-1].exit_reason = event.reason or "exit"
    return segments


RESTART_GAP_SECONDS = 300.0
RESTART_GAP_STEPS = 100.0  # ... and this many typical step times


def infer_segments(
    steps: np.ndarray,
    times: np.ndarray | None = None,
    busy: Sequence[tuple[float, float]] = (),
    checkpoint_steps: Sequence[int] = (),
) -> list[SegmentSpec]:
    """Segments from a log alone. A new process starts where the step goes back or repeats, or
    where the log pauses for longer than ``RESTART_GAP_SECONDS`` and 100 typical step times
    beyond what checkpoint saves (``busy`` intervals) explain. A resumed process starts from the
    latest checkpoint before its first logged step."""
    if steps.size == 0:
        return [SegmentSpec(ordinal=0, start_step=0, source="inferred")]
    boundary = steps[1:] <= steps[:-1]
    if times is not None and times.size == steps.size and times.size > 2:
        boundary |= _restart_pauses(times, busy)
    starts = np.concatenate(([0], np.flatnonzero(boundary) + 1)).tolist()
    interval = max(int(np.median(np.diff(steps))), 1) if steps.size > 1 else 1
    saved = sorted(checkpoint_steps)
    segments = []
    for ordinal, row in enumerate(starts):
        first = int(steps[row])
        start = 0 if ordinal == 0 and first <= interval else first - 1
        if ordinal > 0:
            before = bisect_right(saved, first - 1)  # the latest checkpoint before the row
            start = saved[before - 1] if before else start
        segments.append(
            SegmentSpec(
                ordinal=ordinal,
                start_step=start,
                started_at=_at(times, row),
                source="inferred",
            )
        )
        if ordinal > 0 and first > int(steps[row - 1]):
            # the log continued without a replay: the previous process ended at its last row
            segments[ordinal - 1].end_step = int(steps[row - 1])
    return segments


def _restart_pauses(times: np.ndarray, busy: Sequence[tuple[float, float]]) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        dt = np.diff(times)
    typical = float(np.nanmedian(dt)) if np.isfinite(dt).any() else 0.0
    threshold = max(RESTART_GAP_SECONDS, RESTART_GAP_STEPS * typical)
    long = np.nan_to_num(dt, nan=0.0) > threshold
    rows = np.flatnonzero(long)
    if rows.size and busy:
        start, end = times[rows], times[rows + 1]
        saving = _busy_until(end, busy) - _busy_until(start, busy)
        long[rows[(end - start) - saving <= threshold]] = False  # a slow save explains it
    return long


def _busy_until(t: np.ndarray, busy: Sequence[tuple[float, float]]) -> np.ndarray:
    """For each time in ``t``, the seconds of ``busy`` intervals before it (an interval counted
    once for each time it is listed), so that ``_busy_until(b) - _busy_until(a)`` is the busy
    time within ``[a, b]``: prefix sums over the sorted starts and ends, not a loop per pair."""
    spans = np.asarray(busy, dtype=np.float64).reshape(-1, 2)
    spans = spans[np.isfinite(spans).all(axis=1) & (spans[:, 0] <= spans[:, 1])]
    total = np.zeros(t.size)
    for edge, sign in ((np.sort(spans[:, 0]), 1.0), (np.sort(spans[:, 1]), -1.0)):
        before = np.searchsorted(edge, t)  # edges strictly before t (those at t add nothing)
        summed = np.concatenate(([0.0], np.cumsum(edge)))
        total += sign * (before * t - summed[before])  # sum of max(0, t - edge)
    return total


def assign_rows(
    steps: np.ndarray, segments: Sequence[SegmentSpec], times: np.ndarray | None = None
) -> np.ndarray:
    """Segment ordinal of every row of a log written in file order (non-decreasing)."""
    n = steps.size
    out = np.zeros(n, dtype=np.uint16)
    if n < 2 or len(segments) < 2:
        return out
    prev, cur = steps[:-1], steps[1:]
    went_back = cur < prev
    repeated = cur == prev
    starts = []
    start = 0
    for k in range(len(segments) - 1):
        current, nxt = segments[k], segments[k + 1]
        # boundary candidates are rows start+1 .. n-1, i.e. pair indices start .. n-2, looked
        # at in growing windows: the rows a segment spans are looked at a bounded number of
        # times, so many segments over many rows cost no more than the rows
        lo, width, hit = start, 256, None
        while hit is None and lo < n - 1:
            hi = min(lo + width, n - 1)
            boundary = went_back[lo:hi].copy()
            if nxt.start_step is None:
                boundary |= repeated[lo:hi]
            else:
                boundary |= repeated[lo:hi] & (cur[lo:hi] > nxt.start_step)
            if current.end_step is not None:
                boundary |= prev[lo:hi] >= current.end_step
            if times is not None and nxt.started_at is not None:
                boundary |= times[lo + 1 : hi + 1] >= nxt.started_at
            hits = np.flatnonzero(boundary)
            if hits.size:
                hit = lo + int(hits[0])
            lo, width = hi, width * 2
        if hit is None:
            break
        start = hit + 1
        starts.append(start)
    if starts:
        marks = np.zeros(n, dtype=np.int64)
        marks[starts] = 1
        out[:] = np.cumsum(marks)  # the number of segment starts at or before each row
    return out


def complete_from_rows(
    segments: list[SegmentSpec],
    steps: np.ndarray,
    ordinals: np.ndarray,
    times: np.ndarray | None = None,
) -> None:
    """Fill what events did not record (end step, start/end time) from each segment's rows."""
    for seg, rows in zip(segments, _rows_of(segments, ordinals), strict=True):
        if rows.size == 0:
            continue
        if seg.end_step is None:
            seg.end_step = int(steps[rows].max())
        if seg.start_step is None:
            seg.start_step = max(int(steps[rows[0]]) - 1, 0)
        if times is not None:
            if seg.started_at is None:
                seg.started_at = _at(times, int(rows[0]))
            if seg.ended_at is None:
                seg.ended_at = _at(times, int(rows[-1]))


def _rows_of(segments: Sequence[SegmentSpec], ordinals: np.ndarray) -> list[np.ndarray]:
    """Each segment's rows. Ordinals as assign_rows gives them (non-decreasing) make each
    segment one slice, found for all segments in one search instead of a pass each."""
    keys = np.asarray([seg.ordinal for seg in segments], dtype=np.int64)
    if ordinals.size > 1 and not bool((ordinals[1:] >= ordinals[:-1]).all()):
        return [np.flatnonzero(ordinals == key) for key in keys.tolist()]
    ordered = ordinals.astype(np.int64)
    first = np.searchsorted(ordered, keys, side="left").tolist()
    after = np.searchsorted(ordered, keys, side="right").tolist()
    return [np.arange(a, b) for a, b in zip(first, after, strict=True)]


def unexpected_restarts(steps: np.ndarray, ordinals: np.ndarray) -> list[int]:
    """Rows where the step goes back inside one segment: a restart the events did not record."""
    if steps.size < 2:
        return []
    back = (steps[1:] < steps[:-1]) & (ordinals[1:] == ordinals[:-1])
    return (np.flatnonzero(back) + 1).tolist()


def _at(times: np.ndarray | None, row: int) -> float | None:
    if times is None or row >= times.size:
        return None
    value = float(times[row])
    return None if np.isnan(value) else value

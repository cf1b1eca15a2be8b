"""Per-epoch sample coverage: which dataset indices each designed epoch saw, and how often.

The analyzers read coverage through the small ``Coverage`` protocol. ``CoverageMap`` answers it
from a whole trace in memory; ``coverage_parts.MergedCoverage`` answers it from per-epoch
summaries computed elsewhere (a worker per chunk of epochs), reading ids only when an exact
order comparison needs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from app.analysis.epochs import EpochPlan
from app.analysis.model import Trace

GRID_BINS = 64  # dataset-index bins of the coverage heatmap
ORDER_HEAD = 65_536  # leading ids of an epoch's order compared first (order.py)

GridSums = tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass
class EpochCoverage:
    epoch: int
    first_step: int
    last_step: int
    steps_logged: int
    complete: bool  # the run reached the end of this epoch
    samples: int  # ids consumed in the epoch's steps
    unseen: int  # dataset ids never seen in the epoch
    repeated: int  # dataset ids seen more than once
    extra: int  # consumptions beyond the first, summed over ids

    @property
    def steps_expected(self) -> int:
        return self.last_step - self.first_step + 1

    @property
    def has_gaps(self) -> bool:
        return self.steps_logged < self.steps_expected


class Coverage(Protocol):
    """What the analyzers read about the designed epochs' coverage."""

    @property
    def plan(self) -> EpochPlan: ...

    @property
    def epochs(self) -> list[EpochCoverage]: ...  # every epoch the trace reaches, in order

    def unseen_mask(self, epoch: int) -> np.ndarray: ...  # bool per dataset id: never seen

    def repeated_ids(self, epoch: int) -> np.ndarray: ...  # ids seen more than once, ascending

    def order_head(self, epoch: int) -> np.ndarray: ...  # the first ORDER_HEAD ids, in order

    def ids(self, epoch: int) -> np.ndarray: ...  # every id the epoch consumed, in order

    def grid_sums(self, epoch: int) -> GridSums: ...  # the heatmap column (``grid_column``)


class CoverageMap:
    """Coverage of every designed epoch the trace reaches, with the id counts kept on demand."""

    def __init__(self, trace: Trace, plan: EpochPlan) -> None:
        self.trace = trace
        self.plan = plan
        self.size = max(plan.dataset_size, trace.max_id() + 1)
        self.grid_edges = grid_edges(plan.dataset_size, GRID_BINS)
        # per epoch, the heatmap's bin sums, taken while its counts are at hand
        self._grid: dict[int, GridSums] = {}
        self._counts: tuple[int, np.ndarray] | None = None  # the last epoch counted
        last_step = last_trace_step(trace)
        self.epochs: list[EpochCoverage] = []
        for e in epochs_reached(plan, last_step):
            counts = self.counts(e)
            self._grid[e] = grid_column(counts, plan.dataset_size, self.grid_edges)
            self.epochs.append(epoch_coverage(trace, plan, e, counts, last_step))

    def rows(self, epoch: int) -> tuple[int, int]:
        return epoch_rows(self.trace, self.plan, epoch)

    def ids(self, epoch: int) -> np.ndarray:
        return epoch_ids(self.trace, self.plan, epoch)

    def counts(self, epoch: int) -> np.ndarray:
        if self._counts is not None and self._counts[0] == epoch:
            return self._counts[1]
        counts = np.bincount(self.ids(epoch), minlength=self.size)[: self.size]
        self._counts = (epoch, counts)
        return counts

    def unseen_mask(self, epoch: int) -> np.ndarray:
        return self.counts(epoch)[: self.plan.dataset_size] == 0

    def repeated_ids(self, epoch: int) -> np.ndarray:
        return np.flatnonzero(self.counts(epoch) > 1)

    def order_head(self, epoch: int) -> np.ndarray:
        return self.ids(epoch)[:ORDER_HEAD]

    def grid_sums(self, epoch: int) -> GridSums:
        return self._grid[epoch]


def last_trace_step(trace: Trace) -> int:
    return int(trace.steps[-1]) if trace.size else 0


def epochs_reached(plan: EpochPlan, last_step: int) -> range:
    """The designed epochs a trace whose last logged step is ``last_step`` reaches."""
    return range(plan.epoch_of_step(max(last_step, 1)) + 1)


def epoch_rows(trace: Trace, plan: EpochPlan, epoch: int) -> tuple[int, int]:
    """Rows ``[lo, hi)`` of the trace logged in the epoch's step window."""
    first, last = plan.window(epoch)
    lo = int(np.searchsorted(trace.steps, first, side="left"))
    hi = int(np.searchsorted(trace.steps, last, side="right"))
    return lo, hi


def epoch_ids(trace: Trace, plan: EpochPlan, epoch: int) -> np.ndarray:
    """Ids the epoch consumed, in order. In the stream layout the steps at either end may be
    shared with the neighbouring epoch: only this epoch's part of them counts."""
    lo, hi = epoch_rows(trace, plan, epoch)
    if lo == hi:
        return trace.id_slice(0, 0)
    start = int(trace.counts[:lo].sum())
    end = start + int(trace.counts[lo:hi].sum())
    if plan.stream:
        first_step, last_step = plan.window(epoch)
        first_pos, end_pos = plan.positions(epoch)
        batch = plan.global_batch_size
        if int(trace.steps[lo]) == first_step:
            start += first_pos - (first_step - 1) * batch
        if int(trace.steps[hi - 1]) == last_step:
            end -= last_step * batch - end_pos
    return trace.id_slice(start, end)


def epoch_coverage(
    trace: Trace, plan: EpochPlan, epoch: int, counts: np.ndarray, last_step: int
) -> EpochCoverage:
    """The epoch's statistics from its id counts; ``last_step``: the trace's last logged step
    (the whole trace's, when ``trace`` is a window of it)."""
    first, last = plan.window(epoch)
    lo, hi = epoch_rows(trace, plan, epoch)
    samples = int(counts.sum())
    return EpochCoverage(
        epoch=epoch,
        first_step=first,
        last_step=last,
        steps_logged=hi - lo,
        complete=last_step >= last,
        samples=samples,
        unseen=plan.dataset_size - int(np.count_nonzero(counts[: plan.dataset_size])),
        repeated=int(np.count_nonzero(counts > 1)),
        extra=samples - int(np.count_nonzero(counts)),
    )


def grid_column(counts: np.ndarray, dataset_size: int, edges: np.ndarray) -> GridSums:
    """The heatmap column of one epoch: per index bin, the sum of min(count, 3), the ids never
    seen and the ids seen more than once."""
    counts = counts[:dataset_size]
    sums = bin_sums(counts, edges)
    if sums is not None:
        return sums
    bins = edges.size - 1
    which = np.searchsorted(edges, np.arange(counts.size), side="right") - 1
    return (
        np.bincount(which, weights=np.minimum(counts, 3), minlength=bins),
        np.bincount(which, weights=(counts == 0), minlength=bins),
        np.bincount(which, weights=(counts > 1), minlength=bins),
    )


def grid_edges(size: int, bins: int) -> np.ndarray:
    """``bins + 1`` boundaries of equal dataset-index bins (fewer bins for a tiny dataset)."""
    bins = max(1, min(bins, size))
    return np.linspace(0, size, bins + 1).round().astype(np.int64)


def bin_sums(
    counts: np.ndarray, edges: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Per bin ``[edges[i], edges[i + 1])`` of ``counts``: the sum of min(count, 3), the ids never
    seen and the ids seen more than once (int64). Contiguous bins make these one pass each.
    None when the bins are not all non-empty and contiguous over ``counts``."""
    starts = edges[:-1]
    if counts.size == 0 or int(edges[0]) != 0 or int(edges[-1]) != counts.size:
        return None
    if not bool((np.diff(edges) > 0).all()):
        return None
    return (
        np.add.reduceat(np.minimum(counts, 3), starts, dtype=np.int64),
        np.add.reduceat(counts == 0, starts, dtype=np.int64),
        np.add.reduceat(counts > 1, starts, dtype=np.int64),
    )

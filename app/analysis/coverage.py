"""Per-epoch sample coverage: which dataset indices each designed epoch saw, and how often."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.analysis.epochs import EpochPlan
from app.analysis.model import Trace

GRID_BINS = 64  # dataset-index bins of the coverage heatmap


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


class CoverageMap:
    """Coverage of every designed epoch the trace reaches, with the id counts kept on demand."""

    def __init__(self, trace: Trace, plan: EpochPlan) -> None:
        self.trace = trace
        self.plan = plan
        self.size = max(plan.dataset_size, int(trace.ids.max()) + 1 if trace.ids.size else 0)
        self._offsets = trace.offsets
        self.grid_edges = grid_edges(plan.dataset_size, GRID_BINS)
        # per epoch, the heatmap's bin sums, taken while its counts are at hand
        self.grid_sums: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        last_step = int(trace.steps[-1]) if trace.size else 0
        self.epochs: list[EpochCoverage] = [
            self._epoch(e, last_step) for e in range(plan.epoch_of_step(max(last_step, 1)) + 1)
        ]

    def rows(self, epoch: int) -> tuple[int, int]:
        first, last = self.plan.window(epoch)
        lo = int(np.searchsorted(self.trace.steps, first, side="left"))
        hi = int(np.searchsorted(self.trace.steps, last, side="right"))
        return lo, hi

    def ids(self, epoch: int) -> np.ndarray:
        """Ids the epoch consumed, in order. In the stream layout the steps at either end may
        be shared with the neighbouring epoch: only this epoch's part of them counts."""
        lo, hi = self.rows(epoch)
        start, end = int(self._offsets[lo]), int(self._offsets[hi])
        if self.plan.stream and lo < hi:
            first_step, last_step = self.plan.window(epoch)
            first_pos, end_pos = self.plan.positions(epoch)
            batch = self.plan.global_batch_size
            if int(self.trace.steps[lo]) == first_step:
                start += first_pos - (first_step - 1) * batch
            if int(self.trace.steps[hi - 1]) == last_step:
                end -= last_step * batch - end_pos
        return self.trace.ids[start:end]

    def counts(self, epoch: int) -> np.ndarray:
        return np.bincount(self.ids(epoch), minlength=self.size)[: self.size]

    def _epoch(self, epoch: int, last_step: int) -> EpochCoverage:
        first, last = self.plan.window(epoch)
        lo, hi = self.rows(epoch)
        counts = self.counts(epoch)
        sums = bin_sums(counts[: self.plan.dataset_size], self.grid_edges)
        if sums is not None:
            self.grid_sums[epoch] = sums
        samples = int(counts.sum())
        return EpochCoverage(
            epoch=epoch,
            first_step=first,
            last_step=last,
            steps_logged=hi - lo,
            complete=last_step >= last,
            samples=samples,
            unseen=self.plan.dataset_size - int(np.count_nonzero(counts[: self.plan.dataset_size])),
            repeated=int(np.count_nonzero(counts > 1)),
            extra=samples - int(np.count_nonzero(counts)),
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

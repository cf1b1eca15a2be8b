"""Coverage in parts: per-epoch summaries computed from one window of the trace each, merged
into a ``Coverage`` the analyzers accept in place of a ``CoverageMap``.

A part is a run of whole designed epochs. ``summarize_epochs`` needs only the trace rows of
that step window and returns, per epoch, everything the analyzers read from its id counts: the
statistics, the heatmap column, packed bitmaps of the ids never seen and seen more than once,
and the first ``ORDER_HEAD`` ids of its order. ``MergedCoverage`` answers the ``Coverage``
protocol from them; only an exact order comparison (two epochs whose leading ids mostly agree)
reads whole epochs again, through the trace it is given (a paged trace reads them from storage).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from app.analysis.coverage import (
    GRID_BINS,
    ORDER_HEAD,
    EpochCoverage,
    GridSums,
    epoch_coverage,
    epoch_ids,
    epochs_reached,
    grid_column,
    grid_edges,
    last_trace_step,
)
from app.analysis.epochs import EpochPlan
from app.analysis.model import Trace


@dataclass
class EpochSummary:
    """What one designed epoch's ids show, computed from that epoch's window alone."""

    coverage: EpochCoverage
    grid: GridSums  # the heatmap column over GRID_BINS index bins
    unseen: np.ndarray  # packed bits, one per dataset id: never seen in the epoch
    repeated: np.ndarray  # packed bits, one per id from 0: seen more than once
    head: np.ndarray  # the first ORDER_HEAD ids of the epoch, in order


def epoch_parts(plan: EpochPlan, last_step: int, max_ids: int) -> list[range]:
    """The epochs a trace reaches, cut into runs of whole epochs of about ``max_ids`` ids each
    (at least one epoch per part)."""
    epochs = epochs_reached(plan, last_step)
    per_part = max(1, max_ids // max(plan.samples_per_epoch, 1))
    return [range(lo, min(lo + per_part, epochs.stop)) for lo in range(0, epochs.stop, per_part)]


def step_window(plan: EpochPlan, epochs: range) -> tuple[int, int]:
    """First and last step whose ids a part's epochs consumed: the rows a part must read."""
    return plan.window(epochs.start)[0], plan.window(epochs.stop - 1)[1]


def summarize_epochs(
    trace: Trace, plan: EpochPlan, epochs: Iterable[int], last_step: int
) -> list[EpochSummary]:
    """Summaries of ``epochs`` from ``trace``, which must hold every row of their step window
    (it may hold more). ``last_step`` is the whole trace's last logged step."""
    edges = grid_edges(plan.dataset_size, GRID_BINS)
    size = max(plan.dataset_size, trace.max_id() + 1)
    out = []
    for epoch in epochs:
        ids = epoch_ids(trace, plan, epoch)
        counts = np.bincount(ids, minlength=size)
        out.append(
            EpochSummary(
                coverage=epoch_coverage(trace, plan, epoch, counts, last_step),
                grid=grid_column(counts, plan.dataset_size, edges),
                unseen=np.packbits(counts[: plan.dataset_size] == 0),
                repeated=np.packbits(counts > 1),
                head=ids[:ORDER_HEAD].copy(),
            )
        )
    return out


class MergedCoverage:
    """The ``Coverage`` of a trace from the summaries of all its epochs. ``trace`` is the whole
    trace; its ids are read only for exact order comparisons (``ids``)."""

    def __init__(self, plan: EpochPlan, summaries: Sequence[EpochSummary], trace: Trace) -> None:
        self.plan = plan
        self.trace = trace
        self._parts = {s.coverage.epoch: s for s in summaries}
        reached = epochs_reached(plan, last_trace_step(trace))
        if len(summaries) != len(reached) or sorted(self._parts) != list(reached):
            raise ValueError(
                f"summaries of epochs {sorted(self._parts)} do not cover epochs"
                f" {reached.start}-{reached.stop - 1} exactly once"
            )
        self.epochs: list[EpochCoverage] = [self._parts[e].coverage for e in reached]
        self._orders: dict[int, np.ndarray] = {}  # the last two whole orders read

    def unseen_mask(self, epoch: int) -> np.ndarray:
        bits = np.unpackbits(self._parts[epoch].unseen, count=self.plan.dataset_size)
        return bits.view(bool)

    def repeated_ids(self, epoch: int) -> np.ndarray:
        return np.flatnonzero(np.unpackbits(self._parts[epoch].repeated))

    def order_head(self, epoch: int) -> np.ndarray:
        return self._parts[epoch].head

    def ids(self, epoch: int) -> np.ndarray:
        """The epoch's whole order, read from the trace (a repeat check compares each later
        epoch with the same earlier one: the last two stay)."""
        ids = self._orders.pop(epoch, None)
        if ids is None:
            ids = epoch_ids(self.trace, self.plan, epoch)
        self._orders[epoch] = ids
        while len(self._orders) > 2:
            del self._orders[next(iter(self._orders))]
        return ids

    def grid_sums(self, epoch: int) -> GridSums:
        return self._parts[epoch].grid

"""A coverage heatmap aggregated for display: designed epochs x dataset-index bins.

Each cell is how many times, on average, the samples of one index bin were seen within one
designed epoch (0: never, 1: once as designed, 2+: repeated), with the shares of the bin that
were unseen and repeated for hovering. A few dozen bins keep the page light for any dataset.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from app.analysis.coverage import CoverageMap

MAX_BINS = 64


@dataclass
class CoverageGrid:
    step_edges: list[float]  # E + 1 step boundaries of the designed epochs (x)
    index_edges: list[int]  # B + 1 dataset-index boundaries (y)
    mean_seen: list[list[float | None]]  # B x E; None where the epoch was not reached
    unseen: list[list[float | None]]  # B x E shares
    repeated: list[list[float | None]]
    epochs: list[dict[str, int | bool]] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {
            "step_edges": self.step_edges,
            "index_edges": self.index_edges,
            "mean_seen": self.mean_seen,
            "unseen": self.unseen,
            "repeated": self.repeated,
            "epochs": self.epochs,
        }


def coverage_grid(coverage: CoverageMap, bins: int = MAX_BINS) -> CoverageGrid:
    plan = coverage.plan
    size = plan.dataset_size
    bins = max(1, min(bins, size))
    edges = np.linspace(0, size, bins + 1).round().astype(np.int64)
    which = np.searchsorted(edges, np.arange(size), side="right") - 1
    per_bin = np.bincount(which, minlength=bins).astype(np.float64)
    mean_seen, unseen, repeated, step_edges, epochs = [], [], [], [], []
    for epoch in coverage.epochs:
        first, last = plan.window(epoch.epoch)
        step_edges.append(float(first) - 0.5)
        counts = coverage.counts(epoch.epoch)[:size].astype(np.float64)
        seen = np.bincount(which, weights=np.minimum(counts, 3.0), minlength=bins) / per_bin
        zero = np.bincount(which, weights=(counts == 0), minlength=bins) / per_bin
        many = np.bincount(which, weights=(counts > 1), minlength=bins) / per_bin
        mean_seen.append(seen.round(3).tolist())
        unseen.append(zero.round(3).tolist())
        repeated.append(many.round(3).tolist())
        epochs.append(
            {
                "epoch": epoch.epoch,
                "first_step": first,
                "last_step": last,
                "unseen": epoch.unseen,
                "repeated": epoch.repeated,
                "complete": epoch.complete,
            }
        )
    if coverage.epochs:
        step_edges.append(float(plan.window(coverage.epochs[-1].epoch)[1]) + 0.5)
    return CoverageGrid(
        step_edges=step_edges,
        index_edges=edges.tolist(),
        mean_seen=_transpose(mean_seen),
        unseen=_transpose(unseen),
        repeated=_transpose(repeated),
        epochs=epochs,
    )


def _transpose(columns: list[list[float]]) -> list[list[float | None]]:
    """Epoch columns to bin rows (heatmap z is rows of y)."""
    if not columns:
        return []
    return [list(row) for row in zip(*columns, strict=True)]

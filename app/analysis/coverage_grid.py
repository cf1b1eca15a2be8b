"""A coverage heatmap aggregated for display: designed epochs x dataset-index bins.

Each cell is how many times, on average, the samples of one index bin were seen within one
designed epoch (0: never, 1: once as designed, 2+: repeated), with the shares of the bin that
were unseen and repeated for hovering. A few dozen bins keep the page light for any dataset.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from app.analysis.coverage import GRID_BINS, Coverage, grid_edges


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


def coverage_grid(coverage: Coverage) -> CoverageGrid:
    """The grid over ``GRID_BINS`` index bins, from the columns the coverage holds."""
    plan = coverage.plan
    edges = grid_edges(plan.dataset_size, GRID_BINS)
    per_bin = np.diff(edges).astype(np.float64)
    mean_seen, unseen, repeated, step_edges, epochs = [], [], [], [], []
    for epoch in coverage.epochs:
        first, last = plan.window(epoch.epoch)
        step_edges.append(float(first) - 0.5)
        seen, zero, many = (s / per_bin for s in coverage.grid_sums(epoch.epoch))
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

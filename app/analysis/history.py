"""The effective history of a re-logged series: the latest segment's point for every step."""

from __future__ import annotations

import numpy as np


def split_effective(steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of the effective points (last occurrence of each step, sorted by step) and of
    the superseded points (in file order). Rows must be in file order."""
    n = steps.size
    if n < 2 or bool((steps[1:] > steps[:-1]).all()):
        return np.arange(n, dtype=np.int64), np.zeros(0, dtype=np.int64)
    _, first_in_reversed = np.unique(steps[::-1], return_index=True)
    effective = (n - 1 - first_in_reversed).astype(np.int64)
    keep = np.ones(n, dtype=bool)
    keep[effective] = False
    return effective, np.flatnonzero(keep).astype(np.int64)

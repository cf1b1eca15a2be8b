"""Downsampling for charts that never hides a spike: each bucket keeps its minimum and maximum."""

from __future__ import annotations

import numpy as np


def minmax_indices(values: np.ndarray, max_points: int) -> np.ndarray:
    """Sorted indices of at most ``max_points`` points: the first and last point, and the min and
    max of each of ``max_points // 2`` equal-count buckets. NaN never wins a bucket."""
    n = values.size
    if n <= max_points:
        return np.arange(n, dtype=np.int64)
    buckets = max(max_points // 2 - 1, 1)
    width = -(-n // buckets)
    padded = buckets * width
    if values.dtype.kind == "f" and padded - n < width and not np.isnan(values).any():
        return _minmax_no_nan(values, buckets, width)
    low = np.full(padded, np.inf)
    high = np.full(padded, -np.inf)
    finite_or_inf = ~np.isnan(values)
    low[:n] = np.where(finite_or_inf, values, np.inf)
    high[:n] = np.where(finite_or_inf, values, -np.inf)
    base = np.arange(buckets, dtype=np.int64) * width
    lo_idx = base + low.reshape(buckets, width).argmin(axis=1)
    hi_idx = base + high.reshape(buckets, width).argmax(axis=1)
    picked = np.concatenate(([0, n - 1], lo_idx, hi_idx))
    picked = picked[picked < n]
    return np.unique(picked)


def _minmax_no_nan(values: np.ndarray, buckets: int, width: int) -> np.ndarray:
    """:func:`minmax_indices` without the padded copies: the full buckets are one reshaped view,
    the shorter last bucket is searched on its own (no NaN to mask)."""
    n = values.size
    full = n // width  # buckets holding ``width`` points; the last one may hold fewer
    view = values[: full * width].reshape(full, width)
    base = np.arange(full, dtype=np.int64) * width
    lo_idx = [base + view.argmin(axis=1)]
    hi_idx = [base + view.argmax(axis=1)]
    if full < buckets and full * width < n:
        tail = values[full * width :]
        lo_idx.append(np.array([full * width + int(tail.argmin())], dtype=np.int64))
        hi_idx.append(np.array([full * width + int(tail.argmax())], dtype=np.int64))
    picked = np.concatenate(([0, n - 1], *lo_idx, *hi_idx))
    return np.unique(picked)

from __future__ import annotations

import numpy as np

from app.analysis.downsample import minmax_indices


def test_one_step_spike_survives_downsampling() -> None:
    rng = np.random.default_rng(0)
    values = rng.normal(1.0, 0.01, 1_000_000)
    values[777_777] = 16.0
    values[123_456] = -5.0
    picked = minmax_indices(values, 2000)
    assert picked.size <= 2000
    assert {777_777, 123_456, 0, 999_999} <= set(picked.tolist())
    assert np.all(np.diff(picked) > 0)


def test_short_series_is_returned_whole_and_nan_never_wins() -> None:
    assert minmax_indices(np.arange(5.0), 10).tolist() == [0, 1, 2, 3, 4]
    values = np.array([1.0, np.nan, 3.0, 2.0, np.nan, 0.5, 4.0, 1.0])
    picked = minmax_indices(values, 4)
    assert 6 in picked.tolist() and 5 in picked.tolist()


def _reference(values: np.ndarray, max_points: int) -> np.ndarray:
    """Bucket by bucket: the first and last point, each bucket's first minimum and maximum."""
    n = values.size
    buckets = max(max_points // 2 - 1, 1)
    width = -(-n // buckets)
    picked = {0, n - 1}
    for lo in range(0, n, width):
        part = values[lo : lo + width]
        if np.isnan(part).all():  # nothing to compare: the bucket's first point stands for it
            picked.add(lo)
            continue
        picked.add(lo + int(np.nanargmin(part)))
        picked.add(lo + int(np.nanargmax(part)))
    return np.array(sorted(picked))


def test_buckets_match_a_plain_loop_with_and_without_nan() -> None:
    rng = np.random.default_rng(1)
    for trial in range(400):
        n, max_points = int(rng.integers(2, 3000)), int(rng.integers(2, 200))
        values = rng.normal(size=n)
        if trial % 3 == 1:
            values = np.round(values, 1)  # ties: the first one wins
        if trial % 3 == 2:
            values[rng.integers(0, n, 3)] = np.nan
            values[rng.integers(0, n, 2)] = np.inf
        if n > max_points:
            assert (
                minmax_indices(values, max_points).tolist()
                == _reference(values, max_points).tolist()
            )

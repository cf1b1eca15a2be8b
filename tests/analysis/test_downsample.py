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

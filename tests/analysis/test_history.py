from __future__ import annotations

import numpy as np

from app.analysis.history import split_effective


def test_later_copy_of_a_replayed_step_is_effective() -> None:
    steps = np.array([1, 2, 3, 4, 5, 3, 4, 5, 6])
    effective, superseded = split_effective(steps)
    assert effective.tolist() == [0, 1, 5, 6, 7, 8]
    assert superseded.tolist() == [2, 3, 4]
    assert steps[effective].tolist() == [1, 2, 3, 4, 5, 6]


def test_monotonic_log_is_all_effective() -> None:
    effective, superseded = split_effective(np.arange(10))
    assert effective.tolist() == list(range(10))
    assert superseded.size == 0

from __future__ import annotations

import numpy as np

from app.analysis.segments import (
    LifecycleEvent,
    assign_rows,
    complete_from_rows,
    infer_segments,
    segments_from_events,
    unexpected_restarts,
)


def _events(*items: tuple[str, int, float]) -> list[LifecycleEvent]:
    return [LifecycleEvent(kind=k, step=s, time=t) for k, s, t in items]


def test_crash_and_rollback_replay_is_split_where_the_step_goes_back() -> None:
    steps = np.array([1, 2, 3, 4, 5, 3, 4, 5, 6])
    segs = segments_from_events(
        _events(("process_start", 0, 0.0), ("process_exit", 5, 5.0), ("process_start", 2, 9.0))
    )
    assert assign_rows(steps, segs).tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 1]


def test_preemption_right_after_a_save_is_split_at_the_exit_step() -> None:
    steps = np.arange(1, 11)
    segs = segments_from_events(
        _events(("process_start", 0, 0.0), ("process_exit", 5, 5.0), ("process_start", 5, 9.0))
    )
    assert assign_rows(steps, segs).tolist() == [0] * 5 + [1] * 5


def test_without_an_exit_record_the_row_times_split_segments() -> None:
    steps = np.arange(1, 11)
    times = np.array([1, 2, 3, 4, 5, 100, 101, 102, 103, 104], dtype=float)
    segs = segments_from_events(_events(("process_start", 0, 0.0), ("process_start", 5, 99.0)))
    assert assign_rows(steps, segs, times).tolist() == [0] * 5 + [1] * 5


def test_crash_one_step_after_the_checkpoint_repeats_that_step() -> None:
    steps = np.array([1, 2, 3, 3, 4])
    segs = segments_from_events(_events(("process_start", 0, 0.0), ("process_start", 2, 9.0)))
    assert assign_rows(steps, segs).tolist() == [0, 0, 0, 1, 1]


def test_segments_are_inferred_from_steps_when_no_events_exist() -> None:
    steps = np.array([1, 2, 3, 4, 2, 3, 4, 5, 1, 2])
    segs = infer_segments(steps)
    assert [s.start_step for s in segs] == [0, 1, 0]
    ordinals = assign_rows(steps, segs)
    assert ordinals.tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]
    complete_from_rows(segs, steps, ordinals)
    assert [s.end_step for s in segs] == [4, 5, 2]


def test_restart_missing_from_events_is_reported() -> None:
    steps = np.array([1, 2, 3, 2, 3])
    segs = segments_from_events(_events(("process_start", 0, 0.0)))
    ordinals = assign_rows(steps, segs)
    assert unexpected_restarts(steps, ordinals) == [3]


def test_a_long_pause_without_a_save_is_a_restart_but_a_slow_save_is_not() -> None:
    steps = np.arange(1, 11)
    times = np.array([0, 1, 2, 3, 4, 1000, 1001, 1002, 1003, 1004], dtype=float)
    segs = infer_segments(steps, times)
    assert [s.start_step for s in segs] == [0, 5]
    assert assign_rows(steps, segs, times).tolist() == [0] * 5 + [1] * 5
    assert len(infer_segments(steps, times, busy=[(4.5, 999.0)])) == 1


def test_preemption_without_events_resumes_from_the_last_checkpoint() -> None:
    steps = np.arange(5, 101, 5)  # logged every 5 steps; preempted after the save at 50
    times = np.where(steps <= 50, steps.astype(float), steps + 1300.0)
    segs = infer_segments(steps, times, busy=[(50.5, 54.0)], checkpoint_steps=[25, 50, 75])
    assert [(s.start_step, s.end_step) for s in segs] == [(0, 50), (50, None)]
    sample_steps = np.arange(1, 101)  # the sample log has every step and no times
    ordinals = assign_rows(sample_steps, segs)
    assert ordinals.tolist() == [0] * 50 + [1] * 50

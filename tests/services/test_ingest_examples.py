"""Every labelled example run ingests completely, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine

from app.config import Settings
from tests.helpers import (
    checkpoint_name,
    count_source,
    ingest_path,
    segment_rows,
    stored_counts,
    table_counts,
)

EXAMPLES = [
    "clean",
    "double_resume",
    "exact_resume",
    "fresh_seed",
    "megatron_offset",
    "natural_spikes",
    "optimizer_not_loaded",
    "optimizer_not_saved",
    "preempt_exact",
    "scheduler_reset",
    "set_epoch_forgotten",
    "stall_on_save",
]


def test_every_example_ingests_with_its_counts_and_segments(
    engine: Engine, settings: Settings, example_runs: Path
) -> None:
    assert sorted(p.name for p in example_runs.iterdir()) == EXAMPLES
    for name in EXAMPLES:
        run_dir = example_runs / name
        job = ingest_path(engine, settings, run_dir, project="examples")
        assert job.state == "succeeded", (name, job.error)
        assert job.warnings == [], (name, job.warnings)
        expected = count_source(run_dir)
        stored = stored_counts(engine, job.run_id)
        assert stored == {
            "metric_points": expected.metric_points,
            "sample_steps": expected.sample_steps,
            "sample_ids": expected.sample_ids,
            "events": expected.events,
            "checkpoints": expected.checkpoints,
        }, name
        assert job.counts["metric_rows"] == expected.metric_rows
        segments = segment_rows(engine, job.run_id)
        assert [s.start_step for s in segments] == [e["step"] for e in expected.starts], name
        for segment, start in zip(segments, expected.starts, strict=True):
            resumed = start.get("resumed_from")
            want = resumed.rsplit("/", 1)[-1] if resumed else None
            assert checkpoint_name(engine, segment.resumed_from_checkpoint_id) == want
            assert segment.restored == start.get("restored")


def test_exact_resume_has_two_segments_the_second_after_checkpoint_400(
    engine: Engine, settings: Settings, example_runs: Path
) -> None:
    job = ingest_path(engine, settings, example_runs / "exact_resume")
    first, second = segment_rows(engine, job.run_id)
    assert (first.start_step, first.end_step, first.exit_reason) == (0, 437, "crash")
    assert (second.start_step, second.end_step, second.exit_reason) == (400, 840, "finished")
    assert checkpoint_name(engine, second.resumed_from_checkpoint_id) == "step_000400"
    assert (first.num_metric_rows, second.num_metric_rows) == (437, 440)
    # steps 401-437 were logged twice: the later copy is effective, the first is kept as superseded
    assert job.counts["superseded_points"] == 37 * 4
    assert job.counts["superseded_sample_steps"] == 37


def test_preempted_resume_without_replay_is_split_at_the_exit_step(
    engine: Engine, settings: Settings, example_runs: Path
) -> None:
    job = ingest_path(engine, settings, example_runs / "preempt_exact")
    first, second = segment_rows(engine, job.run_id)
    assert (first.num_metric_rows, second.num_metric_rows) == (500, 340)
    assert (first.num_sample_steps, second.num_sample_steps) == (500, 340)


def test_ingesting_the_same_source_twice_changes_nothing(
    engine: Engine, settings: Settings, example_runs: Path
) -> None:
    first = ingest_path(engine, settings, example_runs / "double_resume")
    before = table_counts(engine)
    second = ingest_path(engine, settings, example_runs / "double_resume")
    assert second.state == "succeeded"
    assert second.run_id == first.run_id
    assert table_counts(engine) == before
    assert any("unchanged" in w for w in second.warnings)
    assert second.counts == first.counts

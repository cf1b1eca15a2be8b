"""Every example run ingests through a real Celery worker process, on both stacks (SQLite + the
embedded file-system broker, PostgreSQL + Redis), and `runwatch ingest --wait --json` reports
exactly the findings its truth.json calls for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import Engine

from app.analysis.truth import score
from tests.helpers import count_source, expected_verdict, segment_rows, stored_counts
from tests.procs import background, runwatch, wait_for_log

pytestmark = pytest.mark.integration


def test_examples_ingest_through_a_worker_process(
    service_env: dict[str, str], engine: Engine, example_runs: Path, tmp_path: Path
) -> None:
    runs = sorted(example_runs.iterdir())
    log = tmp_path / "worker.log"
    with background(["worker", "--loglevel", "INFO"], service_env, log) as worker:
        wait_for_log(log, "ready", worker)
        result = runwatch(
            "ingest",
            *map(str, runs),
            "--project",
            "examples",
            "--wait",
            "--json",
            env=service_env,
        )
        assert result.returncode == 0, result.stderr + result.stdout
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(lines) == len(runs)
    assert log.read_text().count("runwatch.ingest") >= len(runs)
    for run_dir, outcome in zip(runs, lines, strict=True):
        assert outcome["status"] == "succeeded", outcome
        assert outcome["error"] is None
        truth = json.loads((run_dir / "truth.json").read_text())
        result = score(truth, outcome["findings"])
        assert result.exact, (run_dir.name, result.missed, result.false_alarms)
        assert outcome["verdict"] == expected_verdict(truth), run_dir.name
        expected = count_source(run_dir)
        stored = stored_counts(engine, outcome["run_id"])
        assert stored["metric_points"] == expected.metric_points, run_dir.name
        assert stored["sample_ids"] == expected.sample_ids, run_dir.name
        assert stored["sample_steps"] == expected.sample_steps, run_dir.name
        assert stored["checkpoints"] == expected.checkpoints, run_dir.name
        segments = segment_rows(engine, outcome["run_id"])
        assert [s.start_step for s in segments] == [e["step"] for e in expected.starts]

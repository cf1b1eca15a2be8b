"""Analysis in parts through real worker processes: with the part size set to one epoch, example
runs ingested with `runwatch ingest --wait --json` report exactly the findings their truth.json
calls for. On PostgreSQL + Redis two workers share the parts; on SQLite + the embedded
file-system broker one worker (solo pool) does them all."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from app.analysis.truth import score
from app.db import session_scope
from app.models import AnalysisBatch
from tests.helpers import expected_verdict
from tests.procs import runwatch, workers

pytestmark = pytest.mark.integration

RUNS = ["clean", "double_resume", "fresh_seed", "megatron_offset", "set_epoch_forgotten"]


def test_examples_analysed_in_parts_across_workers(
    service_env: dict[str, str], backend: str, engine: Engine, example_runs: Path, tmp_path: Path
) -> None:
    env = {**service_env, "RUNWATCH_ANALYSIS_CHUNK_IDS": "1"}  # one part per designed epoch
    count = 2 if backend == "postgresql" else 1
    logs = [tmp_path / f"worker-{i}.log" for i in range(count)]
    runs = [example_runs / name for name in RUNS]
    with workers(env, logs):
        ingest_and_check(runs, env, least_parts={"analysis_parts": 3})
    parts_per_worker = [_done(log, "runwatch.analysis_part") for log in logs]
    merges = sum(_done(log, "runwatch.analysis_merge") for log in logs)
    assert all(n > 0 for n in parts_per_worker), parts_per_worker  # every worker took parts
    assert sum(parts_per_worker) >= 3 * len(runs)  # each run several epochs
    assert merges == len(runs)
    with session_scope(engine) as session:  # merged batches are deleted
        assert session.scalar(select(func.count()).select_from(AnalysisBatch)) == 0


def ingest_and_check(
    runs: list[Path], env: dict[str, str], least_parts: dict[str, int]
) -> list[dict[str, Any]]:
    """`runwatch ingest --wait --json` the runs: each succeeded in at least ``least_parts``
    (count name -> parts) with exactly the findings and verdict of its truth.json."""
    result = runwatch(
        "ingest", *map(str, runs), "--project", "parts", "--wait", "--json", env=env, timeout=600
    )
    assert result.returncode == 0, result.stderr + result.stdout
    outcomes = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(outcomes) == len(runs)
    for run_dir, outcome in zip(runs, outcomes, strict=True):
        assert outcome["status"] == "succeeded", outcome
        for name, least in least_parts.items():
            assert outcome["counts"][name] >= least, (run_dir.name, name)
        truth = json.loads((run_dir / "truth.json").read_text())
        scored = score(truth, outcome["findings"])
        assert scored.exact, (run_dir.name, scored.missed, scored.false_alarms)
        assert outcome["verdict"] == expected_verdict(truth), run_dir.name
    return outcomes


def _done(log: Path, task: str) -> int:
    """Tasks of this name the worker finished (Celery logs each as ``Task NAME[id] succeeded``)."""
    return len(re.findall(rf"Task {re.escape(task)}\[[^\]]+\] succeeded", log.read_text()))

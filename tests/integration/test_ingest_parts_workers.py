"""Ingest and analysis both in parts through real worker processes: each example run's
``samples.jsonl`` is parsed in parts of 20 kB and its analysis split per epoch; `runwatch ingest
--wait --json` reports exactly the findings truth.json calls for. On PostgreSQL + Redis two
workers share the parts; on SQLite + the embedded file-system broker one worker does them all."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

from app.db import session_scope
from app.models import AnalysisBatch, IngestBatch
from tests.integration.test_analysis_parts_workers import _done, ingest_and_check
from tests.procs import workers

pytestmark = pytest.mark.integration

RUNS = ["double_resume", "exact_resume", "megatron_offset", "stall_on_save"]


def test_examples_parsed_and_analysed_in_parts_across_workers(
    service_env: dict[str, str], backend: str, engine: Engine, example_runs: Path, tmp_path: Path
) -> None:
    env = {
        **service_env,
        "RUNWATCH_INGEST_PART_BYTES": "20000",
        "RUNWATCH_ANALYSIS_CHUNK_IDS": "1",
    }
    count = 2 if backend == "postgresql" else 1
    logs = [tmp_path / f"worker-{i}.log" for i in range(count)]
    runs = [example_runs / name for name in RUNS]
    with workers(env, logs):
        outcomes = ingest_and_check(runs, env, least_parts={"ingest_parts": 7, "analysis_parts": 3})
    parts_per_worker = [_done(log, "runwatch.ingest_part") for log in logs]
    assert all(n > 0 for n in parts_per_worker), parts_per_worker  # every worker took parts
    assert sum(parts_per_worker) == sum(o["counts"]["ingest_parts"] for o in outcomes)
    with session_scope(engine) as session:  # finished batches are deleted
        assert session.scalar(select(func.count()).select_from(IngestBatch)) == 0
        assert session.scalar(select(func.count()).select_from(AnalysisBatch)) == 0

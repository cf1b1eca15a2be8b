"""Fixtures of the reliability tests: the broker of each stack, the settings that make recovery
fast enough to test, and what a clean ingest of each example run stores."""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import Engine, func, select

from app import migrate
from app.config import Settings
from app.db import make_engine, session_scope
from app.models import (
    Checkpoint,
    Event,
    Finding,
    IngestJob,
    MetricSeries,
    Project,
    Run,
    SampleChunk,
    Segment,
)
from tests.conftest import REDIS_URL
from tests.helpers import ingest_path, stored_counts

# Recovery in seconds rather than minutes: a dead worker's job is queued again 3 s after its
# last heartbeat, a lost message 4 s after nothing moved, swept every second.
FAST_RECOVERY = {
    "job_heartbeat_s": "0.5",
    "job_stale_after_s": "3",
    "job_lost_after_s": "4",
    "job_sweep_interval_s": "1",
    "job_max_attempts": "20",
}
PER_RUN_TABLES = (Segment, Event, MetricSeries, SampleChunk, Checkpoint, Finding)


@pytest.fixture
def broker_url(backend: str) -> str:
    """Embedded file-system broker with SQLite; Redis (emptied first) with PostgreSQL."""
    if backend == "sqlite":
        return ""
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    client.close()
    return REDIS_URL


@dataclass(frozen=True)
class Snapshot:
    """What the database holds for one run, to compare with a clean ingest of its source."""

    rows: dict[str, int]  # per-run table -> rows
    stored: dict[str, int]  # metric points, sample steps and ids, events, checkpoints
    job_counts: dict[str, Any]
    verdict: str | None
    status: str
    findings: list[tuple[str, str, int | None]]

    @property
    def rows_checked(self) -> int:
        return sum(self.rows.values())


def snapshot(engine: Engine, run_id: int) -> Snapshot:
    with session_scope(engine) as s:
        run = s.get(Run, run_id)
        assert run is not None
        rows = {
            model.__tablename__: int(
                s.scalar(select(func.count()).select_from(model).where(model.run_id == run_id)) or 0
            )
            for model in PER_RUN_TABLES
        }
        job_counts = s.scalars(
            select(IngestJob.counts)
            .where(IngestJob.run_id == run_id, IngestJob.state == "succeeded")
            .order_by(IngestJob.id.desc())
        ).first()
        findings = sorted(
            (f.kind, f.severity, f.step)
            for f in s.scalars(select(Finding).where(Finding.run_id == run_id))
        )
        verdict, status = run.verdict, run.status
    return Snapshot(
        rows=rows,
        stored=stored_counts(engine, run_id),
        job_counts=dict(job_counts or {}),
        verdict=verdict,
        status=status,
        findings=findings,
    )


@pytest.fixture(scope="session")
def clean_ingest(
    example_runs: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Snapshot]:
    """Each example run ingested once, in process, into a fresh SQLite database."""
    home = tmp_path_factory.mktemp("clean-ingest")
    settings = Settings(home=home, database_url=f"sqlite:///{home / 'clean.db'}")
    engine = make_engine(settings.sqlalchemy_url)
    migrate.upgrade(engine)
    out = {}
    for run_dir in sorted(example_runs.iterdir()):
        job = ingest_path(engine, settings, run_dir, project="clean")
        assert job.state == "succeeded" and job.run_id is not None
        out[run_dir.name] = snapshot(engine, job.run_id)
    engine.dispose()
    return out


@pytest.fixture
def twenty_runs(example_runs: Path, tmp_path: Path) -> dict[str, str]:
    """Twenty run directories: the twelve examples and eight copies under other names (chosen
    with a fixed seed). Run name -> the example it is a copy of."""
    runs = {p.name: p.name for p in sorted(example_runs.iterdir())}
    copies = tmp_path / "copies"
    for name in random.Random(9).sample(sorted(runs), 8):
        shutil.copytree(example_runs / name, copies / f"{name}-copy")
        runs[f"{name}-copy"] = name
    assert len(runs) == 20
    return runs


def run_paths(example_runs: Path, tmp_path: Path, runs: dict[str, str]) -> list[str]:
    return [
        str(example_runs / name if name == base else tmp_path / "copies" / name)
        for name, base in runs.items()
    ]


def job_states(engine: Engine) -> dict[str, int]:
    with session_scope(engine) as s:
        return dict(
            s.execute(select(IngestJob.state, func.count()).group_by(IngestJob.state)).all()
        )


def check_runs(
    engine: Engine, project: str, runs: dict[str, str], clean: dict[str, Snapshot]
) -> tuple[int, int]:
    """Every run of ``project`` equals the clean ingest of its source, and nothing else is
    stored. Returns (rows checked, metric points and sample ids checked)."""
    with session_scope(engine) as s:
        stored = dict(
            s.execute(select(Run.name, Run.id).join(Project).where(Project.name == project)).all()
        )
        assert s.scalar(select(func.count()).select_from(Run)) == len(runs)  # no duplicates
    assert sorted(stored) == sorted(runs)
    rows = points = 0
    totals = dict.fromkeys((m.__tablename__ for m in PER_RUN_TABLES), 0)
    for name, base in runs.items():
        got, want = snapshot(engine, stored[name]), clean[base]
        assert got == want, (name, json.dumps(got.__dict__), json.dumps(want.__dict__))
        rows += got.rows_checked
        points += got.stored["metric_points"] + got.stored["sample_ids"]
        for table, n in got.rows.items():
            totals[table] += n
    with session_scope(engine) as s:  # and no stray rows outside the runs
        for model in PER_RUN_TABLES:
            count = s.scalar(select(func.count()).select_from(model))
            assert count == totals[model.__tablename__], model.__tablename__
    return rows, points


@pytest.fixture
def report() -> Iterator[list[str]]:
    """Lines printed at the end of the test (run pytest with -s to see them)."""
    lines: list[str] = []
    yield lines
    for line in lines:
        print(line)

"""A large run's analysis in parts through the services (no broker: the test is the queue).

Every example run ingested with its analysis split into one part per epoch, the parts run in
reverse order, stores exactly the findings, verdicts, checkpoint verdicts and heatmap of the
analysis in one go; a stale batch, a redelivered part and a job taken over are handled.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select, update

from app.config import Settings
from app.db import session_scope
from app.models import AnalysisBatch, AnalysisPart, Checkpoint, Finding, IngestJob, Run
from app.services import analysis_parts
from app.services import ingest as ingest_service
from app.services.sources import store_path
from tests.helpers import ingest_path


class Queue:
    """Stands in for the broker: what the services enqueue, run when the test says."""

    def __init__(self, engine: Engine, settings: Settings) -> None:
        self.engine = engine
        self.settings = settings
        self.parts: list[int] = []
        self.split_runs: list[int] = []

    def split(self, job_id: int, token: str, run_id: int) -> bool:
        started = analysis_parts.start(
            engine=self.engine,
            settings=self.settings,
            job_id=job_id,
            token=token,
            run_id=run_id,
            enqueue=self.parts.extend,
        )
        if started:
            self.split_runs.append(run_id)
        return started

    def drain(self) -> list[int]:
        """Run the queued parts, last first, then the merges they queue."""
        merges = []
        while self.parts:
            batch_id = analysis_parts.run_part(
                engine=self.engine, settings=self.settings, part_id=self.parts.pop()
            )
            if batch_id is not None:
                merges.append(batch_id)
        for batch_id in merges:
            analysis_parts.merge(engine=self.engine, settings=self.settings, batch_id=batch_id)
        return merges


def submit(engine: Engine, settings: Settings, path: Path, project: str, run: str) -> int:
    source = store_path(path, settings)
    with session_scope(engine) as session:
        return ingest_service.submit(
            session=session, source=source, project=project, run_name=run
        ).id


def ingest_in_parts(
    engine: Engine, settings: Settings, queue: Queue, path: Path, project: str, run: str = ""
) -> IngestJob:
    job_id = submit(engine, settings, path, project, run or path.name)
    ingest_service.run_job(engine=engine, settings=settings, job_id=job_id, split=queue.split)
    queue.drain()
    with session_scope(engine) as session:
        job = session.get(IngestJob, job_id)
        assert job is not None
        return job


def stored_analysis(engine: Engine, run_id: int) -> dict[str, Any]:
    with session_scope(engine) as session:
        run = session.get(Run, run_id)
        assert run is not None
        findings = session.scalars(
            select(Finding).where(Finding.run_id == run_id).order_by(Finding.id)
        ).all()
        checkpoints = session.scalars(
            select(Checkpoint).where(Checkpoint.run_id == run_id).order_by(Checkpoint.step)
        ).all()
        return {
            "verdict": run.verdict,
            "analysis": run.analysis,
            "findings": [
                (
                    f.segment,
                    f.kind,
                    f.severity,
                    f.step,
                    f.step_end,
                    f.resume_from_step,
                    f.message,
                    f.evidence,
                )
                for f in findings
            ],
            "checkpoints": [(c.name, c.verdict, c.verdict_reasons) for c in checkpoints],
        }


@pytest.fixture
def split_settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"analysis_chunk_ids": 1})  # one part per epoch


@pytest.mark.parametrize("backend", ["sqlite"])
def test_example_runs_analysed_in_parts_store_the_same_analysis(
    engine: Engine, split_settings: Settings, example_runs: Path
) -> None:
    queue = Queue(engine, split_settings)
    split = 0
    for run_dir in sorted(example_runs.iterdir()):
        whole = ingest_path(engine, split_settings, run_dir, project="whole")
        parts = ingest_in_parts(engine, split_settings, queue, run_dir, "parts")
        assert parts.state == "succeeded" and parts.warnings == whole.warnings, run_dir.name
        assert parts.run_id is not None and whole.run_id is not None
        split += parts.run_id in queue.split_runs
        assert stored_analysis(engine, parts.run_id) == stored_analysis(engine, whole.run_id), (
            run_dir.name
        )
    assert split == 12  # every example reaches several designed epochs
    with session_scope(engine) as session:  # nothing left behind
        assert session.scalar(select(func.count()).select_from(AnalysisBatch)) == 0
        assert session.scalar(select(func.count()).select_from(AnalysisPart)) == 0


def test_parts_of_replaced_data_are_never_merged(
    engine: Engine, split_settings: Settings, example_runs: Path
) -> None:
    queue = Queue(engine, split_settings)
    first = submit(engine, split_settings, example_runs / "fresh_seed", "p", "r")
    ingest_service.run_job(engine=engine, settings=split_settings, job_id=first, split=queue.split)
    stale_parts = list(queue.parts)
    queue.parts.clear()
    # the run is re-ingested from another source before the first job's parts run
    second = ingest_in_parts(engine, split_settings, queue, example_runs / "exact_resume", "p", "r")
    assert second.state == "succeeded"
    for part_id in stale_parts:
        assert (
            analysis_parts.run_part(engine=engine, settings=split_settings, part_id=part_id) is None
        )
    with session_scope(engine) as session:
        job = session.get(IngestJob, first)
        assert job is not None and job.state == "succeeded"
        assert any("newer ingest" in w for w in job.warnings)
        run = session.get(Run, second.run_id)
        assert run is not None and run.verdict == "pass"  # exact_resume's, not fresh_seed's
        assert session.scalar(select(func.count()).select_from(AnalysisBatch)) == 0


def test_a_redelivered_part_counts_once_and_resends_the_merge(
    engine: Engine, split_settings: Settings, example_runs: Path
) -> None:
    queue = Queue(engine, split_settings)
    job_id = submit(engine, split_settings, example_runs / "fresh_seed", "p", "r")
    ingest_service.run_job(engine=engine, settings=split_settings, job_id=job_id, split=queue.split)
    parts = list(queue.parts)
    assert len(parts) >= 3
    run = lambda part_id: analysis_parts.run_part(  # noqa: E731
        engine=engine, settings=split_settings, part_id=part_id
    )
    assert run(parts[0]) is None
    assert run(parts[0]) is None  # redelivered before the batch is complete
    for part_id in parts[1:-1]:
        assert run(part_id) is None
    batch_id = run(parts[-1])
    assert batch_id is not None
    assert run(parts[-1]) == batch_id  # the merge message may have been lost: sent again
    with session_scope(engine) as session:
        batch = session.get(AnalysisBatch, batch_id)
        assert batch is not None and batch.parts_done == batch.parts == len(parts)
    job = analysis_parts.merge(engine=engine, settings=split_settings, batch_id=batch_id)
    assert job is not None and job.state == "succeeded"
    assert analysis_parts.merge(engine=engine, settings=split_settings, batch_id=batch_id) is None


def test_parts_of_a_job_taken_over_commit_nothing(
    engine: Engine, split_settings: Settings, example_runs: Path
) -> None:
    queue = Queue(engine, split_settings)
    job_id = submit(engine, split_settings, example_runs / "fresh_seed", "p", "r")
    ingest_service.run_job(engine=engine, settings=split_settings, job_id=job_id, split=queue.split)
    with session_scope(engine) as session:  # what the recovery sweep does to a silent job
        session.execute(
            update(IngestJob).where(IngestJob.id == job_id).values(state="queued", claim_token=None)
        )
    assert queue.drain() == []
    with session_scope(engine) as session:
        assert session.scalar(select(func.count()).select_from(AnalysisBatch)) == 0
        job = session.get(IngestJob, job_id)
        assert job is not None and job.state == "queued"
    # the job runs again (in one task: its rows are already stored) and finishes
    job = ingest_service.run_job(engine=engine, settings=split_settings, job_id=job_id)
    assert job.state == "succeeded"
    with session_scope(engine) as session:
        run = session.get(Run, job.run_id)
        assert run is not None and run.verdict == "fail"


def test_small_runs_are_analysed_in_one_task(
    engine: Engine, settings: Settings, example_runs: Path
) -> None:
    queue = Queue(engine, settings)  # the default: parts of about 20M ids
    job = ingest_in_parts(engine, settings, queue, example_runs / "fresh_seed", "p")
    assert job.state == "succeeded" and queue.split_runs == []

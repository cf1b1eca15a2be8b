"""A large sample trace parsed in parts through the services (no broker: the test is the queue).

Every example run ingested with its ``samples.jsonl`` cut into parts of 20 kB (about nine each),
the parts run last first, stores exactly the trace, counts, warnings and analysis of an ingest in
one go. Bad input in a part fails the job naming the file and line, and keeps the run's stored
data; a redelivered part, a job taken over and a trace too small to split are handled.
"""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine, func, select, update
from sqlalchemy.exc import OperationalError

from app.config import Settings
from app.db import session_scope
from app.ingest.source import SourceTree
from app.models import IngestBatch, IngestJob, IngestPart
from app.services import ingest as ingest_service
from app.services import ingest_parts, recovery, traces
from tests.helpers import ingest_path
from tests.services.test_analysis_parts import stored_analysis, submit

PART_BYTES = 20_000


class Queue:
    """Stands in for the broker: parts queued by the services, run when the test says; the
    job sent back by the last part is run as the worker would (with its claim token)."""

    def __init__(self, engine: Engine, settings: Settings) -> None:
        self.engine = engine
        self.settings = settings
        self.parts: list[int] = []
        self.split_jobs: list[int] = []

    def split(self, job_id: int, token: str, tree: SourceTree) -> bool:
        started = ingest_parts.start(
            engine=self.engine,
            settings=self.settings,
            job_id=job_id,
            token=token,
            tree=tree,
            enqueue=self.parts.extend,
        )
        if started:
            self.split_jobs.append(job_id)
        return started

    def run_part(self, part_id: int) -> tuple[int, str] | None:
        return ingest_parts.run_part(engine=self.engine, settings=self.settings, part_id=part_id)

    def drain(self) -> None:
        """Run the queued parts, last first, then the job the last one sends back."""
        back = []
        while self.parts:
            last = self.run_part(self.parts.pop())
            if last is not None:
                back.append(last)
        for job_id, token in back:
            self.run_job(job_id, token)

    def run_job(self, job_id: int, token: str | None = None) -> IngestJob:
        return ingest_service.run_job(
            engine=self.engine,
            settings=self.settings,
            job_id=job_id,
            claim_token=token,
            split_ingest=self.split,
        )


def ingest_in_parts(
    engine: Engine, settings: Settings, queue: Queue, path: Path, project: str, run: str = ""
) -> IngestJob:
    job_id = submit(engine, settings, path, project, run or path.name)
    first = queue.run_job(job_id)
    assert first.state == "running" or job_id not in queue.split_jobs
    queue.drain()
    return job(engine, job_id)


def job(engine: Engine, job_id: int) -> IngestJob:
    with session_scope(engine) as session:
        found = session.get(IngestJob, job_id)
        assert found is not None
        return found


def stored_trace(engine: Engine, run_id: int) -> dict[str, Any]:
    with session_scope(engine) as session:
        trace = traces.read_trace(session, run_id, superseded=False)
        assert trace is not None
        return {name: getattr(trace, name) for name in ("steps", "counts", "ids", "segments")}


def left_behind(engine: Engine, settings: Settings) -> tuple[int, int, list[Path]]:
    with session_scope(engine) as session:
        batches = session.scalar(select(func.count()).select_from(IngestBatch)) or 0
        parts = session.scalar(select(func.count()).select_from(IngestPart)) or 0
    folder = settings.sources_path / ingest_parts.PARTS_FOLDER
    return batches, parts, sorted(folder.iterdir()) if folder.exists() else []


@pytest.fixture
def split_settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"ingest_part_bytes": PART_BYTES})


@pytest.mark.parametrize("backend", ["sqlite"])
def test_example_traces_parsed_in_parts_store_the_same_run(
    engine: Engine, split_settings: Settings, example_runs: Path
) -> None:
    queue = Queue(engine, split_settings)
    for run_dir in sorted(example_runs.iterdir()):
        whole = ingest_path(engine, split_settings, run_dir, project="whole")
        parts = ingest_in_parts(engine, split_settings, queue, run_dir, "parts")
        assert parts.id in queue.split_jobs, run_dir.name
        assert parts.state == "succeeded", (run_dir.name, parts.error)
        assert parts.warnings == whole.warnings, run_dir.name
        expected_parts = (run_dir / "samples.jsonl").stat().st_size // PART_BYTES
        assert parts.counts["ingest_parts"] in (expected_parts, expected_parts + 1)
        assert {k: v for k, v in parts.counts.items() if k != "ingest_parts"} == whole.counts
        assert parts.run_id is not None and whole.run_id is not None
        got, want = stored_trace(engine, parts.run_id), stored_trace(engine, whole.run_id)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=run_dir.name)
        assert stored_analysis(engine, parts.run_id) == stored_analysis(engine, whole.run_id)
    assert len(queue.split_jobs) == 12
    assert left_behind(engine, split_settings) == (0, 0, [])


def test_bad_line_in_a_part_names_the_line_and_keeps_the_stored_run(
    engine: Engine, split_settings: Settings, example_runs: Path, tmp_path: Path
) -> None:
    queue = Queue(engine, split_settings)
    good = ingest_in_parts(engine, split_settings, queue, example_runs / "clean", "p", "r")
    assert good.state == "succeeded" and good.run_id is not None
    before = stored_trace(engine, good.run_id)
    broken = tmp_path / "clean"
    shutil.copytree(example_runs / "clean", broken)
    samples = broken / "samples.jsonl"
    lines = samples.read_bytes().splitlines(keepends=True)
    bad = len(lines) * 3 // 4  # well inside a later part
    lines[bad] = b'{"step": 7, "sample_ids": [1, 2, "three"]}\n'
    samples.write_bytes(b"".join(lines))

    failed = ingest_in_parts(engine, split_settings, queue, broken, "p", "r")
    assert failed.state == "failed"
    assert failed.error is not None
    assert "samples.jsonl" in failed.error and f"line {bad + 1}" in failed.error, failed.error
    whole = ingest_path(engine, split_settings.model_copy(update={"ingest_part_bytes": 0}), broken)
    assert whole.error == failed.error  # the same message as a parse in one task
    after = stored_trace(engine, good.run_id)
    for name in before:
        np.testing.assert_array_equal(after[name], before[name])
    queue.drain()  # parts still queued find their batch gone
    assert left_behind(engine, split_settings) == (0, 0, [])


def test_truncated_last_line_warns_as_in_one_task(
    engine: Engine, split_settings: Settings, example_runs: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "cut"
    shutil.copytree(example_runs / "stall_on_save", run_dir)
    with (run_dir / "samples.jsonl").open("ab") as out:
        out.write(b'{"step": 99999, "sample_ids": [1, 2')  # a writer killed mid-line
    queue = Queue(engine, split_settings)
    parts = ingest_in_parts(engine, split_settings, queue, run_dir, "p")
    whole = ingest_path(engine, split_settings, run_dir, project="w")
    assert parts.state == whole.state == "succeeded"
    assert any("truncated last line" in w for w in parts.warnings)
    assert parts.warnings == whole.warnings


def test_a_redelivered_part_counts_once_and_sends_the_job_back_again(
    engine: Engine, split_settings: Settings, example_runs: Path
) -> None:
    queue = Queue(engine, split_settings)
    job_id = submit(engine, split_settings, example_runs / "fresh_seed", "p", "r")
    assert queue.run_job(job_id).state == "running"
    parts = list(queue.parts)
    assert len(parts) >= 3
    assert queue.run_part(parts[0]) is None
    assert queue.run_part(parts[0]) is None  # redelivered before the batch is complete
    for part_id in parts[1:-1]:
        assert queue.run_part(part_id) is None
    last = queue.run_part(parts[-1])
    assert last is not None and last[0] == job_id
    assert queue.run_part(parts[-1]) == last  # the job's message may have been lost: again
    assert job(engine, job_id).phase == f"parsing samples: {len(parts)}/{len(parts)} parts"
    done = queue.run_job(*last)
    assert done.state == "succeeded" and done.counts["ingest_parts"] == len(parts)
    assert queue.run_job(*last).state == "succeeded"  # a duplicate finds the job finished
    assert left_behind(engine, split_settings) == (0, 0, [])


def test_parts_of_a_job_taken_over_are_dropped(
    engine: Engine, split_settings: Settings, example_runs: Path
) -> None:
    queue = Queue(engine, split_settings)
    job_id = submit(engine, split_settings, example_runs / "fresh_seed", "p", "r")
    queue.run_job(job_id)
    with session_scope(engine) as session:  # what the recovery sweep does to a silent job
        session.execute(
            update(IngestJob).where(IngestJob.id == job_id).values(state="queued", claim_token=None)
        )
    stale = list(queue.parts)
    queue.parts.clear()
    assert all(queue.run_part(part_id) is None for part_id in stale)
    assert left_behind(engine, split_settings) == (0, 0, [])
    # the job's next try splits again and finishes
    assert queue.run_job(job_id).state == "running"
    queue.drain()
    assert job(engine, job_id).state == "succeeded"


def test_small_traces_and_disabled_splitting_parse_in_one_task(
    engine: Engine, settings: Settings, example_runs: Path
) -> None:
    for part_bytes in (0, 10 << 20):
        tuned = settings.model_copy(update={"ingest_part_bytes": part_bytes})
        queue = Queue(engine, tuned)
        done = ingest_in_parts(engine, tuned, queue, example_runs / "clean", f"p{part_bytes}")
        assert done.state == "succeeded" and "ingest_parts" not in done.counts
        assert queue.split_jobs == []
    assert left_behind(engine, settings) == (0, 0, [])


def test_a_try_that_retries_keeps_the_parsed_parts(
    engine: Engine, split_settings: Settings, example_runs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database away (or a concurrent ingest of the run) while the parts are used: the task
    retries with the same token and uses them again instead of parsing again."""
    queue = Queue(engine, split_settings)
    job_id = submit(engine, split_settings, example_runs / "fresh_seed", "p", "r")
    queue.run_job(job_id)
    parts = list(queue.parts)
    queue.parts.clear()
    back = [queue.run_part(part_id) for part_id in parts][-1]
    assert back is not None
    real_store = ingest_service._store

    def away(*args: Any, **kwargs: Any) -> int:
        raise OperationalError("INSERT", {}, Exception("server closed the connection"))

    monkeypatch.setattr(ingest_service, "_store", away)
    with pytest.raises(OperationalError):
        queue.run_job(*back)
    monkeypatch.setattr(ingest_service, "_store", real_store)
    done = queue.run_job(*back)
    assert done.state == "succeeded" and done.counts["ingest_parts"] == len(parts)
    assert queue.parts == []  # not split again
    assert left_behind(engine, split_settings) == (0, 0, [])


def test_sweep_lets_a_job_wait_for_its_parts_while_the_queue_moves(
    engine: Engine, split_settings: Settings, example_runs: Path
) -> None:
    """Parts behind a long queue beat for nobody: their job is swept like a queued job, not like
    one whose worker died, so it does not start over while workers are busy elsewhere."""
    queue = Queue(engine, split_settings)
    job_id = submit(engine, split_settings, example_runs / "fresh_seed", "p", "r")
    assert queue.run_job(job_id).state == "running"
    beat = job(engine, job_id).heartbeat_at
    assert beat is not None
    stale = split_settings.job_stale_after_s
    lost = split_settings.job_lost_after_s

    def sweep(after: float) -> list[int]:
        with session_scope(engine) as session:
            found = recovery.recover(
                session=session, settings=split_settings, now=beat + timedelta(seconds=after)
            )
            return found.requeued

    assert sweep(stale + 1) == []  # a job without parts would be queued again by now
    other = submit(engine, split_settings, example_runs / "clean", "p", "other")
    with session_scope(engine) as session:  # another job taken by a worker: the queue moves
        session.execute(
            update(IngestJob)
            .where(IngestJob.id == other)
            .values(started_at=beat + timedelta(seconds=lost))
        )
    assert sweep(lost + 1) == []
    assert sweep(2 * lost + 2) == [job_id]  # no worker took anything for as long: lost parts
    queue.parts.clear()
    assert queue.run_job(job_id).state == "running"  # the next try cuts again
    queue.drain()
    assert job(engine, job_id).state == "succeeded"
    assert left_behind(engine, split_settings) == (0, 0, [])

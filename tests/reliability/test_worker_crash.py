"""Workers killed with SIGKILL while twenty runs ingest and analyse lose and duplicate nothing,
on both stacks (SQLite + the embedded file-system broker, which loses the message of a killed
task; PostgreSQL + Redis, which would hand it back only after its visibility timeout).

Two ``runwatch worker`` processes (one with ``--beat``, so beat dies with it too) take the
jobs; a seeded random sequence of kills hits them, mostly while a job is in the middle of
reading, writing or analysing, sometimes whatever they are doing; each killed worker is started
again. Then every job has succeeded, no job or run is left running, there are twenty runs and
each stores exactly what a clean ingest of its source stores, row for row."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from app.config import Settings
from app.db import session_scope
from app.models import IngestJob
from app.services import ingest as ingest_service
from app.services.sources import store_path
from tests.procs import runwatch_env, wait_for_log
from tests.reliability.conftest import (
    FAST_RECOVERY,
    Snapshot,
    check_runs,
    job_states,
    run_paths,
)
from tests.reliability.servers import Workers, workers

pytestmark = pytest.mark.integration

SEED = 20261130
KILLS = 6


def running_jobs(engine: Engine) -> list[tuple[int, str | None, str | None]]:
    with session_scope(engine) as s:
        return [
            (job_id, worker, phase)
            for job_id, worker, phase in s.execute(
                select(IngestJob.id, IngestJob.worker, IngestJob.phase).where(
                    IngestJob.state == "running"
                )
            ).all()
        ]


def holder_pid(worker: str | None) -> int | None:
    return int(worker.rsplit(":", 1)[1]) if worker else None


def held_by(engine: Engine, pid: int) -> tuple[int, str] | None:
    """The job the process ``pid`` holds, and its phase, if it holds one."""
    for job_id, worker, phase in running_jobs(engine):
        if holder_pid(worker) == pid:
            return job_id, phase or "running"
    return None


def next_target(
    pool: Workers, engine: Engine, rng: random.Random, jobs_left: Callable[[], bool]
) -> int | None:
    """A worker to kill: one a job is running in (three times in four), after a random part of
    a typical job, or any live one at a random moment. None once there is nothing left to do."""
    if rng.random() < 0.25:
        time.sleep(rng.uniform(0.1, 1.0))
        alive = pool.pid_index()
        return rng.choice(sorted(alive.values())) if alive and jobs_left() else None
    while jobs_left():
        alive = pool.pid_index()
        held = sorted(
            (job_id, alive[pid])
            for job_id, worker, _ in running_jobs(engine)
            if (pid := holder_pid(worker)) in alive
        )
        if held:
            time.sleep(rng.uniform(0.0, 0.15))
            return rng.choice(held)[1]
        time.sleep(0.01)
    return None


def inject_kills(
    pool: Workers, engine: Engine, rng: random.Random, submitter: subprocess.Popen[bytes]
) -> tuple[list[str], list[int]]:
    """Kill workers KILLS times while jobs are coming or going; returns where each landed and
    the jobs cut off (one entry per kill that left its job running).

    A worker frozen inside a system call (its commit's write) stops only when the call returns,
    so a job seen running at the freeze may still be recorded as done before the kill lands:
    the job's row after the worker is dead says whether it was cut off."""

    def jobs_left() -> bool:
        return submitter.poll() is None or bool({"queued", "running"} & set(job_states(engine)))

    landed: list[str] = []
    cut_off: list[int] = []
    deadline = time.monotonic() + 90
    while len(landed) < KILLS and time.monotonic() < deadline:
        target = next_target(pool, engine, rng, jobs_left)
        if target is None:
            break
        pid = pool.procs[target].pid
        os.killpg(pid, signal.SIGSTOP)  # freeze it, then see where it was
        held = held_by(engine, pid)
        pool.kill(target)
        if held is None:
            landed.append("between jobs")
        elif (still := held_by(engine, pid)) and still[0] == held[0]:
            landed.append(f"mid-job ({still[1]})")
            cut_off.append(held[0])
        else:
            landed.append(f"as a job finished ({held[1]})")
        time.sleep(rng.uniform(0.1, 1.0))
        pool.start(target, *(["--beat"] if target == 0 else []))
    return landed, cut_off


def test_killed_workers_lose_and_duplicate_nothing(
    backend: str,
    engine: Engine,
    database_url: str,
    broker_url: str,
    example_runs: Path,
    twenty_runs: dict[str, str],
    clean_ingest: dict[str, Snapshot],
    tmp_path: Path,
    report: list[str],
) -> None:
    settings = {"home": str(tmp_path / "home"), "database_url": database_url, **FAST_RECOVERY}
    if broker_url:
        settings["broker_url"] = broker_url
    env = runwatch_env(**settings)
    rng = random.Random(SEED)
    with workers(env, tmp_path / "logs") as pool:
        pool.start(0, "--beat")
        pool.start(1)
        for index, proc in pool.procs.items():
            wait_for_log(tmp_path / "logs" / f"worker-{index}.log", "ready", proc)
        started = time.monotonic()
        with (tmp_path / "ingest.log").open("wb") as out:
            submitter = subprocess.Popen(
                [
                    *(sys.executable, "-m", "app", "ingest", "--project", "chaos"),
                    *run_paths(example_runs, tmp_path, twenty_runs),
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            landed, cut_off = inject_kills(pool, engine, rng, submitter)
        finally:
            assert submitter.wait(timeout=120) == 0, (tmp_path / "ingest.log").read_text()
        chaos_s = time.monotonic() - started
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            states = job_states(engine)
            if set(states) <= {"succeeded", "failed"}:
                break
            time.sleep(0.2)
        done_s = time.monotonic() - started
        logs = pool.log_text()
        starts = pool.starts

    assert job_states(engine) == {"succeeded": 20}, logs[-6000:]
    with session_scope(engine) as s:
        jobs = list(s.scalars(select(IngestJob)))
    assert all(j.error is None and j.phase is None for j in jobs)
    assert len({j.run_id for j in jobs}) == 20
    rows, points = check_runs(engine, "chaos", twenty_runs, clean_ingest)

    mid_job = [w for w in landed if w.startswith("mid-job")]
    rerun = sum(j.attempts - 1 for j in jobs)
    assert len(landed) == KILLS, landed
    assert len(mid_job) >= 2, landed
    attempts = {j.id: j.attempts for j in jobs}
    for job_id in set(cut_off):  # every job cut off was taken again, once per cut
        assert attempts[job_id] >= 1 + cut_off.count(job_id), (job_id, landed, logs[-6000:])
    report.append(
        f"worker crash [{backend}]: {len(jobs)} jobs, {len(landed)} SIGKILLs ({len(mid_job)}"
        f" mid-job: {', '.join(landed)}), {starts} worker starts, {rerun} job rerun(s);"
        f" {rows} rows and {points} metric points + sample ids checked against a clean ingest;"
        f" kills over {chaos_s:.1f} s, all done {done_s:.1f} s after submitting"
    )


EMBEDDED_THREAD = """
import time
from app.config import get_settings
from workers.celery_app import celery_app
from workers.embedded import EmbeddedWorker

with EmbeddedWorker(celery_app, get_settings()):
    print("consuming", flush=True)
    time.sleep(120)
"""


@pytest.mark.parametrize("backend", ["sqlite"])
def test_the_embedded_worker_thread_recovers_a_job_its_crashed_predecessor_left(
    engine: Engine, database_url: str, example_runs: Path, tmp_path: Path
) -> None:
    """`runwatch ingest --wait` and `watch` consume the queue from a thread without beat: the
    thread sweeps itself, so a job a killed `runwatch serve` left running is finished."""
    home = tmp_path / "home"
    source = store_path(example_runs / "clean", Settings(home=home, database_url=database_url))
    long_ago = datetime.now(UTC) - timedelta(hours=1)
    with session_scope(engine) as s:
        job = ingest_service.submit(session=s, source=source, project="p", run_name="left")
        job.state, job.attempts, job.worker = "running", 1, "gone:1"
        job.heartbeat_at = job.started_at = long_ago
        job_id = job.id
    env = runwatch_env(home=str(home), database_url=database_url, **FAST_RECOVERY)
    log = tmp_path / "thread.log"
    with log.open("wb") as out:
        thread_worker = subprocess.Popen(
            [sys.executable, "-c", EMBEDDED_THREAD], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and job_states(engine) != {"succeeded": 1}:
            assert thread_worker.poll() is None, log.read_text()
            time.sleep(0.2)
    finally:
        thread_worker.terminate()
        thread_worker.wait(timeout=30)
    with session_scope(engine) as s:
        done = s.get(IngestJob, job_id)
        assert done is not None
        assert (done.state, done.attempts, done.error) == ("succeeded", 2, None), log.read_text()

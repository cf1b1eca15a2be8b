"""Job claims and the recovery sweep, through the services, on SQLite and PostgreSQL: a job runs
for one claim at a time, a worker that lost its claim commits nothing, a job whose worker died
is queued again (and failed after too many tries), a lost message is sent again only when the
queue stands still, and a lost live refresh is started."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, update
from sqlalchemy.exc import OperationalError

from app.config import Settings
from app.db import session_scope
from app.models import IngestJob, Run
from app.services import ingest as ingest_service
from app.services import job_claims, live, recovery
from app.services.sources import store_path
from tests.helpers import count_source, ingest_path, stored_counts, table_counts


class Killed(BaseException):
    """Stands in for SIGKILL: nothing after it runs, not even ``except Exception``."""


def submit(engine: Engine, settings: Settings, path: Path, run: str | None = None) -> int:
    source = store_path(path, settings)
    with session_scope(engine) as session:
        job = ingest_service.submit(
            session=session, source=source, project="p", run_name=run or path.name
        )
        return job.id


def job(engine: Engine, job_id: int) -> IngestJob:
    with session_scope(engine) as session:
        found = session.get(IngestJob, job_id)
        assert found is not None
        return found


def set_job(engine: Engine, job_id: int, **values: Any) -> None:
    with session_scope(engine) as session:
        session.execute(update(IngestJob).where(IngestJob.id == job_id).values(**values))


def sweep(engine: Engine, settings: Settings, now: datetime | None = None) -> recovery.Recovery:
    with session_scope(engine) as session:
        return recovery.recover(session=session, settings=settings, now=now)


def test_a_job_is_claimed_once_and_taken_back_only_by_its_own_token(
    engine: Engine, settings: Settings, example_runs: Path
) -> None:
    job_id = submit(engine, settings, example_runs / "clean")
    with session_scope(engine) as session:
        assert job_claims.claim(session=session, job_id=job_id, token="a" * 32)
    with session_scope(engine) as session:
        assert not job_claims.claim(session=session, job_id=job_id, token="b" * 32)
        assert job_claims.claim(session=session, job_id=job_id, token="a" * 32)
    held = job(engine, job_id)
    assert (held.state, held.attempts, held.claim_token) == ("running", 1, "a" * 32)
    assert held.heartbeat_at is not None and held.worker
    # a duplicate message (a fresh token) leaves the running job alone
    again = ingest_service.run_job(engine=engine, settings=settings, job_id=job_id)
    assert (again.state, again.counts, again.claim_token) == ("running", {}, "a" * 32)
    # the retry of the try that holds it runs it
    done = ingest_service.run_job(
        engine=engine, settings=settings, job_id=job_id, claim_token="a" * 32
    )
    assert (done.state, done.attempts) == ("succeeded", 1)
    assert ingest_service.run_job(engine=engine, settings=settings, job_id=job_id).state == (
        "succeeded"
    )


def test_a_worker_that_lost_its_claim_writes_nothing(
    engine: Engine, settings: Settings, example_runs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = submit(engine, settings, example_runs / "exact_resume")
    plan = ingest_service.plan_layout

    def taken_over(*args: Any) -> Any:  # the sweep gave the job to another worker meanwhile
        set_job(engine, job_id, claim_token="c" * 32)
        return plan(*args)

    monkeypatch.setattr(ingest_service, "plan_layout", taken_over)
    result = ingest_service.run_job(engine=engine, settings=settings, job_id=job_id)
    assert (result.state, result.claim_token, result.counts) == ("running", "c" * 32, {})
    assert set(table_counts(engine).values()) == {0}  # the run's rows were rolled back


def test_a_retry_after_a_database_error_takes_its_job_back(
    engine: Engine, settings: Settings, example_runs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = submit(engine, settings, example_runs / "fresh_seed")
    plan = ingest_service.plan_layout
    calls = []

    def flaky(*args: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError("SELECT 1", {}, Exception("server closed the connection"))
        return plan(*args)

    monkeypatch.setattr(ingest_service, "plan_layout", flaky)
    with pytest.raises(OperationalError):
        ingest_service.run_job(
            engine=engine, settings=settings, job_id=job_id, claim_token="t" * 32
        )
    assert job(engine, job_id).state == "running"
    done = ingest_service.run_job(
        engine=engine, settings=settings, job_id=job_id, claim_token="t" * 32
    )
    assert (done.state, done.attempts, done.error) == ("succeeded", 1, None)


def test_sweep_requeues_a_job_whose_worker_died_and_the_rerun_equals_a_clean_ingest(
    engine: Engine, settings: Settings, example_runs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = example_runs / "double_resume"
    job_id = submit(engine, settings, run_dir)

    def killed(*args: Any, **kwargs: Any) -> Any:  # dies after the run's rows are committed
        raise Killed

    with monkeypatch.context() as patch:
        patch.setattr(ingest_service, "_analyze_and_finish", killed)
        with pytest.raises(Killed):
            ingest_service.run_job(engine=engine, settings=settings, job_id=job_id)
    dead = job(engine, job_id)
    assert (dead.state, dead.phase, dead.attempts) == ("running", "analyzing", 1)
    assert sweep(engine, settings).to_enqueue == []  # its heartbeat is fresh
    later = datetime.now(UTC) + timedelta(seconds=settings.job_stale_after_s + 1)
    found = sweep(engine, settings, now=later)
    assert (found.requeued, found.failed) == ([job_id], [])
    assert (job(engine, job_id).state, job(engine, job_id).claim_token) == ("queued", None)

    done = ingest_service.run_job(engine=engine, settings=settings, job_id=job_id)
    assert (done.state, done.attempts, done.warnings) == ("succeeded", 2, [])
    clean_engine_counts = done.counts
    expected = count_source(run_dir)
    assert clean_engine_counts["metric_rows"] == expected.metric_rows
    assert clean_engine_counts["sample_ids"] == expected.sample_ids
    assert stored_counts(engine, done.run_id)["sample_ids"] == expected.sample_ids
    with session_scope(engine) as session:
        run = session.get(Run, done.run_id)
        assert run is not None and run.verdict is not None


def test_sweep_fails_a_job_that_keeps_losing_its_worker(
    engine: Engine, settings: Settings, example_runs: Path
) -> None:
    job_id = submit(engine, settings, example_runs / "clean")
    old = datetime.now(UTC) - timedelta(seconds=settings.job_stale_after_s + 5)
    set_job(
        engine,
        job_id,
        state="running",
        attempts=settings.job_max_attempts,
        heartbeat_at=old,
        started_at=old,
        worker="node-3:4242",
    )
    found = sweep(engine, settings)
    assert (found.failed, found.to_enqueue) == ([job_id], [])
    failed = job(engine, job_id)
    assert failed.state == "failed" and failed.finished_at is not None
    assert "stopped without finishing" in (failed.error or "")
    assert "node-3:4242" in (failed.error or "")


def test_sweep_resends_lost_messages_only_while_the_queue_stands_still(
    engine: Engine, settings: Settings, example_runs: Path
) -> None:
    waiting = submit(engine, settings, example_runs / "clean")
    other = submit(engine, settings, example_runs / "fresh_seed")
    old = datetime.now(UTC) - timedelta(seconds=settings.job_lost_after_s + 5)
    set_job(engine, waiting, created_at=old, heartbeat_at=old)
    set_job(engine, other, state="succeeded", started_at=datetime.now(UTC))
    assert sweep(engine, settings).resent == []  # another job was taken just now: it waits
    set_job(engine, other, started_at=old)
    assert sweep(engine, settings).resent == [waiting]
    assert sweep(engine, settings).resent == []  # sent again just now


def test_sweep_starts_a_live_refresh_that_never_came(
    engine: Engine, settings: Settings, example_runs: Path
) -> None:
    with session_scope(engine) as session:
        run, _ = live.get_or_create_run(session=session, project="p", name="streamed")
        run_id = run.id
    folder = live.live_dir(settings, run_id)
    folder.mkdir(parents=True)
    shutil.copy(example_runs / "clean" / "metrics.jsonl", folder / "metrics.jsonl")
    old = datetime.now(UTC) - timedelta(seconds=settings.job_lost_after_s + 5)
    with session_scope(engine) as session:
        session.execute(
            update(Run)
            .where(Run.id == run_id)
            .values(created_at=old, refresh_requested_at=old + timedelta(seconds=1))
        )
    found = sweep(engine, settings)
    assert len(found.refreshes) == 1 and found.to_enqueue == found.refreshes
    assert sweep(engine, settings).refreshes == []  # its job is queued now
    done = ingest_service.run_job(engine=engine, settings=settings, job_id=found.refreshes[0])
    assert done.state == "succeeded" and done.run_id == run_id


def test_ingest_path_still_runs_a_job_start_to_finish(
    engine: Engine, settings: Settings, example_runs: Path
) -> None:
    done = ingest_path(engine, settings, example_runs / "clean")
    assert (done.state, done.attempts, done.phase) == ("succeeded", 1, None)
    assert done.heartbeat_at is not None


def test_beat_runs_the_sweep_on_the_alerts_queue_and_redis_redelivers_in_time(
    tmp_path: Path,
) -> None:
    from workers.celery_app import create_celery

    settings = Settings(
        home=tmp_path,
        broker_url="redis://127.0.0.1:6379/0",
        job_sweep_interval_s=7,
        broker_visibility_timeout_s=1200,
    )
    conf = create_celery(settings).conf
    assert conf.beat_schedule["recover-jobs"] == {
        "task": "runwatch.recover_jobs",
        "schedule": 7.0,
    }
    assert conf.task_routes["runwatch.recover_jobs"] == {"queue": "alerts"}
    assert conf.broker_transport_options == {"visibility_timeout": 1200.0}
    assert Settings().broker_visibility_timeout_s > Settings().alert_retry_max_s

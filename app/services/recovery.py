"""What a crashed worker or a lost queue message leaves behind, found and handed back.

``recover`` runs on beat every ``job_sweep_interval_s`` (``runwatch.recover_jobs``) and in the
embedded worker thread. In one transaction it:

- puts back in the queue every running job whose heartbeat is older than ``job_stale_after_s``
  (its worker died: with the file-system broker its message died with it, with Redis it comes
  back only after the visibility timeout), or fails it once it has been taken
  ``job_max_attempts`` times (a source that kills its worker every time);
- sends again queued jobs whose message was lost (a broker restarted without persistence, or
  was away when the job was submitted): queued longer than ``job_lost_after_s`` while no worker
  took any job for as long, so a long but moving queue is not flooded with duplicates;
- starts the refresh of live runs that wait for one that never came (its message was lost, or
  its worker died after the job was made), under the same condition.

A running job whose parts (``ingest_parts``, ``analysis_parts``) are still to run has no worker
of its own to beat for it while they wait in the queue: it is swept as a queued job is, queued
again only when its heartbeat is older than ``job_lost_after_s`` while no worker took any job for
as long. So a long queue ahead of the parts does not make their job start over.

The caller enqueues the returned job ids after the commit. A job sent twice runs once: workers
claim jobs (``job_claims``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import ColumnElement, String, and_, cast, exists, or_, select, update
from sqlalchemy.orm import Session, aliased

from app.config import Settings
from app.models import AnalysisBatch, IngestBatch, IngestJob, Run
from app.services import live as live_service

log = logging.getLogger(__name__)

QUEUED, RUNNING, FAILED = "queued", "running", "failed"


@dataclass
class Recovery:
    requeued: list[int] = field(default_factory=list)  # running, worker gone: queued again
    resent: list[int] = field(default_factory=list)  # queued, message lost: sent again
    failed: list[int] = field(default_factory=list)  # worker gone too often: failed
    refreshes: list[int] = field(default_factory=list)  # jobs made for lost live refreshes

    @property
    def to_enqueue(self) -> list[int]:
        return sorted({*self.requeued, *self.resent, *self.refreshes})

    def summary(self) -> dict[str, int]:
        return {
            "requeued": len(self.requeued),
            "resent": len(self.resent),
            "failed": len(self.failed),
            "refreshes": len(self.refreshes),
        }


def recover(*, session: Session, settings: Settings, now: datetime | None = None) -> Recovery:
    """Find and reset what needs recovering; the caller commits, then enqueues ``to_enqueue``."""
    now = now or datetime.now(UTC)
    found = Recovery()
    _abandoned(session, settings, now, found)
    lost_before = now - timedelta(seconds=settings.job_lost_after_s)
    if not _queue_moving(session, lost_before):
        found.resent = _lost_messages(session, now, lost_before)
        found.refreshes = _lost_refreshes(session, settings, lost_before)
    if found.requeued or found.resent or found.failed or found.refreshes:
        log.warning("job recovery: %s", found.summary())
    return found


def _stale(stale_before: datetime) -> ColumnElement[bool]:
    return or_(
        IngestJob.heartbeat_at < stale_before,
        and_(IngestJob.heartbeat_at.is_(None), IngestJob.started_at < stale_before),
    )


def _abandoned(session: Session, settings: Settings, now: datetime, found: Recovery) -> None:
    stale_before = now - timedelta(seconds=settings.job_stale_after_s)
    lost_before = now - timedelta(seconds=settings.job_lost_after_s)
    waiting = _parts_waiting()
    stale = or_(
        and_(~waiting, _stale(stale_before)),
        and_(waiting, _stale(lost_before), ~_queue_moving_clause(lost_before)),
    )
    rows = session.execute(
        select(IngestJob.id, IngestJob.attempts, IngestJob.worker).where(
            IngestJob.state == RUNNING, stale
        )
    ).all()
    for job_id, attempts, worker in rows:
        still = and_(IngestJob.id == job_id, IngestJob.state == RUNNING, stale)
        if attempts >= settings.job_max_attempts:
            values = {
                "state": FAILED,
                "phase": None,
                "finished_at": now,
                "error": f"the worker running this job stopped without finishing, {attempts}"
                " time(s) (the last was "
                f"{worker or 'unknown'}); giving up. A source too large for the worker's memory"
                " does this: ingest it on a bigger worker.",
            }
            target = found.failed
        else:
            values = {"state": QUEUED, "phase": None, "heartbeat_at": now}
            target = found.requeued
        result = session.execute(
            update(IngestJob)
            .where(still)
            .values(claim_token=None, **values)
            .execution_options(synchronize_session=False)
        )
        if getattr(result, "rowcount", 0) == 1:  # its worker may have beaten meanwhile
            target.append(job_id)


def _queue_moving(session: Session, since: datetime) -> bool:
    """Whether any worker took a job since ``since``: then queued jobs are waiting their turn."""
    return session.scalar(select(_queue_moving_clause(since))) or False


def _queue_moving_clause(since: datetime) -> ColumnElement[bool]:
    started = aliased(IngestJob)
    return exists().where(started.started_at >= since)


def _parts_waiting() -> ColumnElement[bool]:
    """The job has parts of its current claim still to run."""
    return or_(
        exists().where(
            IngestBatch.job_id == IngestJob.id,
            IngestBatch.claim_token == IngestJob.claim_token,
            IngestBatch.parts_done < IngestBatch.parts,
        ),
        exists().where(
            AnalysisBatch.job_id == IngestJob.id,
            AnalysisBatch.claim_token == IngestJob.claim_token,
            AnalysisBatch.parts_done < AnalysisBatch.parts,
        ),
    )


def _lost_messages(session: Session, now: datetime, lost_before: datetime) -> list[int]:
    waiting = or_(
        IngestJob.heartbeat_at < lost_before,
        and_(IngestJob.heartbeat_at.is_(None), IngestJob.created_at < lost_before),
    )
    ids = list(session.scalars(select(IngestJob.id).where(IngestJob.state == QUEUED, waiting)))
    if ids:
        session.execute(
            update(IngestJob)
            .where(IngestJob.id.in_(ids), IngestJob.state == QUEUED)
            .values(heartbeat_at=now)  # sent now: not again before another job_lost_after_s
            .execution_options(synchronize_session=False)
        )
    return ids


def _lost_refreshes(session: Session, settings: Settings, lost_before: datetime) -> list[int]:
    """Start the refresh of live runs that asked for one long ago and have no unfinished job."""
    unfinished = exists().where(
        IngestJob.source_key == "live/" + cast(Run.id, String),  # live_service.live_key
        IngestJob.state.in_((QUEUED, RUNNING)),
    )
    pending = list(
        session.scalars(
            select(Run.id).where(
                Run.live.is_(True),
                Run.refresh_requested_at.is_not(None),
                or_(Run.refreshed_at.is_(None), Run.refresh_requested_at > Run.refreshed_at),
                or_(
                    Run.refreshed_at < lost_before,
                    and_(Run.refreshed_at.is_(None), Run.created_at < lost_before),
                ),
                ~unfinished,
            )
        )
    )
    jobs = []
    for run_id in pending:
        job_id = live_service.start_refresh(session=session, settings=settings, run_id=run_id)
        if job_id is not None:
            jobs.append(job_id)
    return jobs

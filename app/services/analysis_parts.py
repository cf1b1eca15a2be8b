"""A large run's analysis split across workers, with fan-out and fan-in in the database.

``start`` (in the ingest task, after the run's rows are committed): a run whose effective trace
holds more than ``analysis_chunk_ids`` ids gets an ``analysis_batch`` of parts, each a window of
whole designed epochs of about that many ids, and one task per part is queued. ``run_part``
reads only its window's sample chunks, summarizes its epochs (``app.analysis.coverage_parts``)
and stores the summaries in its row; the part that brings the batch's count of finished parts
to the total (one atomic ``UPDATE ... RETURNING``) queues the merge. ``merge`` runs the rest of
the analysis on the merged summaries, stores the report, evaluates alerts and finishes the job,
exactly as an analysis in one task does (``ingest.finish_with_parts``).

The job stays ``running`` meanwhile and the batch holds its claim token: every part refreshes
the job's heartbeat, and a part or merge whose job the recovery sweep has handed to another
worker commits nothing (the job is then analysed again, in one task). A batch whose run was
re-ingested meanwhile (its ``data_generation`` moved on) is stale: its job finishes with a
warning and the newer ingest's analysis reports.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from sqlalchemy import Engine, delete, select, update
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.orm import Session

from app.analysis.coverage import last_trace_step
from app.analysis.coverage_parts import epoch_parts, step_window, summarize_epochs
from app.analysis.epochs import EpochPlan
from app.config import Settings
from app.db import session_scope
from app.models import AnalysisBatch, AnalysisPart, IngestJob, Run
from app.services import analysis as analysis_service
from app.services import ingest as ingest_service
from app.services import traces
from app.services.job_claims import ClaimLost, Heartbeat, fenced_update
from app.store.summaries import encode_summaries

log = logging.getLogger(__name__)

Enqueue = Callable[[list[int]], None]


def start(
    *,
    engine: Engine,
    settings: Settings,
    job_id: int,
    token: str,
    run_id: int,
    enqueue: Enqueue,
) -> bool:
    """Split the run's analysis into parts and queue them: True when the parts now own the
    job's analysis, False when it belongs in this task (a small run, one part, no epoch plan,
    or a broker that refused the parts)."""
    try:
        created = _create_batch(engine, settings, job_id, token, run_id)
    except (OperationalError, InterfaceError, ClaimLost):
        raise
    except Exception:  # an analyzer bug in the plan: the analysis in one task reports it
        log.exception("could not split the analysis of run %s; analysing in one", run_id)
        return False
    if created is None:
        return False
    batch_id, part_ids = created
    try:
        enqueue(part_ids)
    except Exception:
        log.exception("could not queue the analysis parts of run %s; analysing in one", run_id)
        with session_scope(engine) as session:
            session.execute(delete(AnalysisBatch).where(AnalysisBatch.id == batch_id))
        return False
    log.info("analysis of run %s: %d parts queued (batch %s)", run_id, len(part_ids), batch_id)
    return True


def _create_batch(
    engine: Engine, settings: Settings, job_id: int, token: str, run_id: int
) -> tuple[int, list[int]] | None:
    """The batch and its parts, committed (None: the run is analysed in one task)."""
    with session_scope(engine) as session:
        if traces.count_ids(session, run_id) <= settings.analysis_chunk_ids:
            return None
        run = session.get(Run, run_id)
        assert run is not None
        plan, trace = analysis_service.plan_run(session=session, run=run)
        if plan is None or trace is None:
            return None
        last_step = last_trace_step(trace)
        parts = epoch_parts(plan, last_step, settings.analysis_chunk_ids)
        if len(parts) < 2:
            return None
        for older in session.scalars(select(AnalysisBatch).where(AnalysisBatch.run_id == run_id)):
            _abandon(session, older, "a newer ingest replaced the run's data")
        batch = AnalysisBatch(
            run_id=run_id,
            job_id=job_id,
            claim_token=token,
            generation=run.data_generation,
            plan=dataclasses.asdict(plan),
            last_step=last_step,
            parts=len(parts),
            parts_done=0,
            items=[
                AnalysisPart(ordinal=i, first_epoch=p.start, last_epoch=p.stop - 1)
                for i, p in enumerate(parts)
            ],
        )
        session.add(batch)
        session.flush()
        fenced_update(session, job_id, token, phase=f"analyzing in {len(parts)} parts")
        return batch.id, [p.id for p in batch.items]


@dataclasses.dataclass(frozen=True)
class _Part:
    batch_id: int
    run_id: int
    job_id: int
    token: str
    generation: int
    plan: EpochPlan
    last_step: int
    epochs: range


def run_part(*, engine: Engine, settings: Settings, part_id: int) -> int | None:
    """Summarize one part's epochs. Returns its batch id when this was the batch's last part
    (the caller queues ``merge``); also when a redelivered message finds it already done, so a
    lost merge message is sent again."""
    with session_scope(engine) as session:
        row = session.get(AnalysisPart, part_id)
        if row is None:  # its batch was finished, dropped as stale, or replaced
            return None
        batch = row.batch
        if row.done_at is not None:
            return batch.id if batch.parts_done >= batch.parts else None
        if batch.job_id is None or batch.claim_token is None:
            session.delete(batch)
            return None
        part = _Part(
            batch.id,
            batch.run_id,
            batch.job_id,
            batch.claim_token,
            batch.generation,
            EpochPlan(**batch.plan),
            batch.last_step,
            range(row.first_epoch, row.last_epoch + 1),
        )
        if _stale(session, part):
            _abandon(session, batch, "a newer ingest replaced the run's data")
            return None
    try:
        with Heartbeat(engine, part.job_id, part.token, settings.job_heartbeat_s):
            with session_scope(engine) as session:
                window = traces.read_window(
                    session, part.run_id, *step_window(part.plan, part.epochs)
                )
            summaries = summarize_epochs(window, part.plan, part.epochs, part.last_step)
            del window
            blob = encode_summaries(summaries)
            with session_scope(engine) as session:
                return _record(session, part, part_id, blob)
    except ClaimLost:
        log.warning("analysis batch %s: its job was taken over; dropping it", part.batch_id)
        with session_scope(engine) as session:
            session.execute(delete(AnalysisBatch).where(AnalysisBatch.id == part.batch_id))
        return None
    except _Stale:
        with session_scope(engine) as session:
            stale = session.get(AnalysisBatch, part.batch_id)
            if stale is not None:
                _abandon(session, stale, "a newer ingest replaced the run's data")
        return None


class _Stale(Exception):
    pass


def _record(session: Session, part: _Part, part_id: int, blob: bytes) -> int | None:
    """Store the part's summaries and count it done, once; the batch id when it was the last."""
    stored = session.execute(
        update(AnalysisPart)
        .where(AnalysisPart.id == part_id, AnalysisPart.done_at.is_(None))
        .values(summary=blob, done_at=datetime.now(UTC))
        .execution_options(synchronize_session=False)
    )
    if getattr(stored, "rowcount", 0) != 1:  # done meanwhile by a duplicate, or dropped
        return None
    if _stale(session, part):  # checked after reading: any newer rows would show here
        raise _Stale
    fenced_update(session, part.job_id, part.token)  # still this batch's job; a heartbeat
    done, total = session.execute(
        update(AnalysisBatch)
        .where(AnalysisBatch.id == part.batch_id)
        .values(parts_done=AnalysisBatch.parts_done + 1)
        .returning(AnalysisBatch.parts_done, AnalysisBatch.parts)
        .execution_options(synchronize_session=False)
    ).one()
    if done < total:
        return None
    job = session.get(IngestJob, part.job_id)
    assert job is not None
    fenced_update(
        session, part.job_id, part.token, counts={**(job.counts or {}), "analysis_parts": total}
    )
    return part.batch_id


def merge(
    *,
    engine: Engine,
    settings: Settings,
    batch_id: int,
    on_alerts: ingest_service.AlertSink | None = None,
) -> IngestJob | None:
    """Merge a finished batch into the run's analysis and finish its job (None when there is
    nothing to do: the batch is gone, unfinished, or stale)."""
    with session_scope(engine) as session:
        batch = session.get(AnalysisBatch, batch_id)
        if batch is None or batch.parts_done < batch.parts:
            return None
        if batch.job_id is None or batch.claim_token is None:
            session.delete(batch)
            return None
        run = session.get(Run, batch.run_id)
        if run is None or run.data_generation != batch.generation:
            _abandon(session, batch, "a newer ingest replaced the run's data")
            return None
        job_id, token, run_id = batch.job_id, batch.claim_token, batch.run_id
    try:
        with Heartbeat(engine, job_id, token, settings.job_heartbeat_s):
            job = ingest_service.finish_with_parts(
                engine, job_id, token, run_id, batch_id, on_alerts
            )
    except ClaimLost:
        log.warning("analysis batch %s: its job was taken over; dropping it", batch_id)
        job = None
    with session_scope(engine) as session:  # left behind when the analysis failed
        session.execute(delete(AnalysisBatch).where(AnalysisBatch.id == batch_id))
    return job


def _stale(session: Session, part: _Part) -> bool:
    generation = session.scalar(select(Run.data_generation).where(Run.id == part.run_id))
    return generation != part.generation


def _abandon(session: Session, batch: AnalysisBatch, reason: str) -> None:
    """Drop a batch that will never merge, finishing its job (if still its own) with a note."""
    if batch.job_id is not None and batch.claim_token is not None:
        job = session.get(IngestJob, batch.job_id)
        note = f"analysis in parts dropped: {reason}; the newer ingest's analysis reports"
        try:
            with session.begin_nested():
                fenced_update(
                    session,
                    batch.job_id,
                    batch.claim_token,
                    state=ingest_service.SUCCEEDED,
                    phase=None,
                    finished_at=datetime.now(UTC),
                    warnings=[*((job.warnings if job is not None else None) or []), note],
                )
        except ClaimLost:
            pass  # the job is another worker's now
    session.execute(delete(AnalysisBatch).where(AnalysisBatch.id == batch.id))

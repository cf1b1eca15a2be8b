"""Ingest jobs: submit a stored source, then parse it and replace the run's data atomically.

The job row is the single source of truth for progress and outcome. Parsing happens outside any
write transaction (progress is committed as it goes); the run's rows and the job's success are
committed together, so a job is "succeeded" exactly when its data is visible.

A worker runs a job only after claiming it, and every write of the job's state is fenced by the
claim (``job_claims``): a redelivered or duplicated message never runs a job twice at once, and a
worker whose job the recovery sweep handed to another commits nothing more.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, delete, func, select
from sqlalchemy.exc import DataError, IntegrityError, InterfaceError, OperationalError
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import session_scope
from app.ingest.aliases import AliasTable
from app.ingest.context import ReadContext
from app.ingest.errors import IngestError, Warnings, printable
from app.ingest.formats import read_source
from app.ingest.records import ParsedRun
from app.ingest.source import SourceTree
from app.models import IngestJob, Project, Run
from app.services import alerts as alert_service
from app.services import analysis as analysis_service
from app.services import ingest_parts, job_claims
from app.services.job_claims import ClaimLost, Heartbeat, fenced_update
from app.services.run_store import RunLayout, plan_layout, replace_run_data
from app.services.sources import StoredSource, open_stored

log = logging.getLogger(__name__)

QUEUED, RUNNING, SUCCEEDED, FAILED = "queued", "running", "succeeded", "failed"
FINAL_STATES = (SUCCEEDED, FAILED)


def submit(*, session: Session, source: StoredSource, project: str, run_name: str) -> IngestJob:
    """Create a queued job for a stored source. Enqueue its task only after this commits."""
    job = IngestJob(
        state=QUEUED,
        project=project,
        run_name=run_name,
        source_name=source.name,
        source_kind=source.kind,
        source_key=source.key,
        source_sha256=source.sha256,
        source_bytes=source.bytes,
        progress_total=source.bytes,
        counts={},
        warnings=[],
    )
    session.add(job)
    session.flush()
    return job


def prune_jobs(*, session: Session, run_id: int, source_key: str, keep: int) -> None:
    """Delete all but the newest ``keep`` finished jobs of a run that read ``source_key``."""
    old = session.scalars(
        select(IngestJob.id)
        .where(
            IngestJob.run_id == run_id,
            IngestJob.source_key == source_key,
            IngestJob.state.in_(FINAL_STATES),
        )
        .order_by(IngestJob.id.desc())
        .offset(keep)
    ).all()
    if old:
        session.execute(delete(IngestJob).where(IngestJob.id.in_(old)))


def get_job(*, session: Session, job_id: int) -> IngestJob | None:
    return session.get(IngestJob, job_id)


def list_jobs(
    *,
    session: Session,
    project: str | None = None,
    run_id: int | None = None,
    state: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> tuple[list[IngestJob], int]:
    """Jobs, newest first, and how many match."""
    query = select(IngestJob)
    if project is not None:
        query = query.where(IngestJob.project == project)
    if run_id is not None:
        query = query.where(IngestJob.run_id == run_id)
    if state is not None:
        query = query.where(IngestJob.state == state)
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    jobs = session.scalars(query.order_by(IngestJob.id.desc()).limit(limit).offset(offset))
    return list(jobs), int(total)


@dataclass
class _Progress:
    """Commits the job's byte counter at most twice a second while a source is parsed; stops the
    parse (``ClaimLost``) once the job belongs to another worker."""

    engine: Engine
    job_id: int
    token: str
    heartbeat: Heartbeat
    done: int = 0
    last: float = 0.0

    def __call__(self, nbytes: int) -> None:
        self.done += nbytes
        now = time.monotonic()
        if now - self.last >= 0.5:
            self.last = now
            self.flush()

    def flush(self, phase: str | None = None) -> None:
        self.heartbeat.check()
        values: dict[str, Any] = {"progress_done": self.done}
        if phase:
            values["phase"] = phase
        with session_scope(self.engine) as session:
            fenced_update(session, self.job_id, self.token, **values)


AlertSink = Callable[[list[int]], None]
# (job id, claim token, run id) -> whether the analysis went to parts that finish the job
# (``analysis_parts.start``); the ingest task passes it, direct callers analyse in one go
SplitAnalysis = Callable[[int, str, int], bool]
# (job id, claim token, the open source) -> whether the parse of a large sample trace went to
# parts that send the job back when done (``ingest_parts.start``); direct callers parse in one go
SplitIngest = Callable[[int, str, SourceTree], bool]


def run_job(
    *,
    engine: Engine,
    settings: Settings,
    job_id: int,
    on_alerts: AlertSink | None = None,
    claim_token: str | None = None,
    split: SplitAnalysis | None = None,
    split_ingest: SplitIngest | None = None,
) -> IngestJob:
    """Do one ingest job. Safe to call again for the same job (a redelivered task): a job that
    is finished, or held by another worker, is returned as it is.

    ``claim_token``: a retry passes the token its earlier try claimed the job with, to take the
    job back (a fresh token is made otherwise). ``on_alerts`` gets the ids of the alert
    deliveries the analysis created, after its commit.
    """
    token = claim_token or job_claims.new_token()
    with session_scope(engine) as session:
        claimed = job_claims.claim(session=session, job_id=job_id, token=token)
        job = session.get(IngestJob, job_id)
        if job is None:
            raise LookupError(f"ingest job {job_id} does not exist")
        if not claimed:
            return job
        source = _job_source(job)
        stored = job.run_id if job.counts else None  # an earlier try committed the run's rows
    try:
        with Heartbeat(engine, job_id, token, settings.job_heartbeat_s) as heartbeat:
            return _run_claimed(
                engine,
                settings,
                job_id,
                token,
                source,
                stored,
                heartbeat,
                on_alerts,
                split,
                split_ingest,
            )
    except ClaimLost:
        log.warning("ingest job %s was taken over by another worker; this try stops", job_id)
        with session_scope(engine) as session:
            job = session.get(IngestJob, job_id)
            assert job is not None
            return job


def _run_claimed(
    engine: Engine,
    settings: Settings,
    job_id: int,
    token: str,
    source: _Source,
    stored: int | None,
    heartbeat: Heartbeat,
    on_alerts: AlertSink | None,
    split: SplitAnalysis | None = None,
    split_ingest: SplitIngest | None = None,
) -> IngestJob:
    unchanged = _unchanged_run(engine, source)
    if unchanged is not None:
        return _finish_unchanged(engine, job_id, token, unchanged)
    if stored is not None and _stored_from(engine, stored, source):
        return _analyze_and_finish(engine, job_id, token, stored, on_alerts)
    warnings = Warnings()
    progress = _Progress(engine, job_id, token, heartbeat)
    traces = ingest_parts.parsed_traces(
        engine=engine, settings=settings, job_id=job_id, token=token
    )
    retrying = False
    try:
        for message in traces.warnings:
            warnings.add(message)
        with open_stored(settings, source.key, source.kind, source.name, warnings) as tree:
            if not traces.parts and split_ingest is not None and split_ingest(job_id, token, tree):
                return _job(engine, job_id)  # running: its parts send it back when parsed
            parsed = _read(settings, tree, warnings, progress, traces)
        progress.flush(phase="writing")
        layout = plan_layout(parsed, warnings)
        _check_sample_ids(parsed, warnings)
        heartbeat.check()
        with session_scope(engine) as session:
            run_id = _store(session, job_id, token, source, parsed, layout, warnings, traces.parts)
    except IngestError as exc:
        return _fail(engine, job_id, token, str(exc), warnings)
    except (OperationalError, InterfaceError, IntegrityError, ClaimLost):
        retrying = True  # the task retries with this token and uses the parsed parts again
        raise  # database away, a concurrent ingest of the same run (the task retries), or lost
    except DataError as exc:  # a value the database refuses: PostgreSQL's int32 columns
        return _fail(engine, job_id, token, _refused_by_database(exc), warnings)
    except Exception as exc:
        log.exception("ingest job %s failed unexpectedly", job_id)
        return _fail(
            engine, job_id, token, f"internal error: {type(exc).__name__}: {exc}", warnings
        )
    finally:
        if traces.parts and not retrying:  # used, or the job failed: done with
            ingest_parts.discard(engine=engine, settings=settings, job_id=job_id)
    if split is not None and split(job_id, token, run_id):
        return _job(engine, job_id)  # running: its analysis parts finish it
    return _analyze_and_finish(engine, job_id, token, run_id, on_alerts)


def _job(engine: Engine, job_id: int) -> IngestJob:
    with session_scope(engine) as session:
        job = session.get(IngestJob, job_id)
        assert job is not None
        return job


def _stored_from(engine: Engine, run_id: int, source: _Source) -> bool:
    """Whether the run still holds the rows this job's earlier try wrote from ``source``."""
    with session_scope(engine) as session:
        run = session.get(Run, run_id)
        return run is not None and run.source_sha256 == source.sha256


def _updated(session: Session, job_id: int, token: str, **values: Any) -> IngestJob:
    """The job after a fenced update (``ClaimLost`` if this worker no longer holds it)."""
    fenced_update(session, job_id, token, **values)
    job = session.get(IngestJob, job_id, populate_existing=True)
    assert job is not None
    return job


def _unchanged_run(engine: Engine, source: _Source) -> int | None:
    """The run already ingested and analysed from exactly this source, if any."""
    with session_scope(engine) as session:
        run = session.scalars(
            select(Run)
            .join(Project)
            .where(Project.name == source.project, Run.name == source.run_name)
        ).one_or_none()
        if run is None or run.source_sha256 != source.sha256 or run.verdict is None:
            return None
        return run.id


def _finish_unchanged(engine: Engine, job_id: int, token: str, run_id: int) -> IngestJob:
    with session_scope(engine) as session:
        job = session.get(IngestJob, job_id)
        assert job is not None
        values: dict[str, Any] = {}
        if job.run_id != run_id or not job.counts:  # not this job's own earlier try
            values["counts"] = dict(_last_counts(session, run_id) or {})
            values["warnings"] = [
                "unchanged: this source is identical to the one already ingested for the run"
            ]
        return _updated(
            session,
            job_id,
            token,
            run_id=run_id,
            state=SUCCEEDED,
            phase=None,
            progress_done=IngestJob.progress_total,
            finished_at=datetime.now(UTC),
            **values,
        )


def finish_with_parts(
    engine: Engine,
    job_id: int,
    token: str,
    run_id: int,
    batch_id: int,
    on_alerts: AlertSink | None = None,
) -> IngestJob:
    """The end of a job whose analysis ran in parts (``analysis_parts``): merge them, then as
    for any job."""
    return _analyze_and_finish(engine, job_id, token, run_id, on_alerts, batch_id=batch_id)


def _analyze_and_finish(
    engine: Engine,
    job_id: int,
    token: str,
    run_id: int,
    on_alerts: AlertSink | None = None,
    *,
    batch_id: int | None = None,
) -> IngestJob:
    """Analyze the stored run and evaluate its alerts, then mark the job succeeded. An analyzer
    bug does not lose the ingested data: the job still succeeds, with the error among its
    warnings. ``batch_id``: the analysis merges that batch of parts (``analysis_parts``)."""
    problem: str | None = None
    deliveries: list[int] = []
    try:
        with session_scope(engine) as session:
            analysis_service.analyze(session=session, run_id=run_id, batch_id=batch_id)
            deliveries = _evaluate_alerts(session, run_id)
            fenced_update(session, job_id, token)  # commit nothing once the job is another's
    except (OperationalError, InterfaceError, ClaimLost):
        raise
    except Exception as exc:
        log.exception("analysis of run %s failed", run_id)
        problem = f"analysis failed: {type(exc).__name__}: {exc}"
        deliveries = []
    if deliveries and on_alerts is not None:
        try:
            on_alerts(deliveries)
        except Exception:  # the broker is away: the sweep queues them within minutes
            log.exception("could not queue alert deliveries %s", deliveries)
    with session_scope(engine) as session:
        job = session.get(IngestJob, job_id)
        assert job is not None
        values: dict[str, Any] = {}
        if problem:
            values["warnings"] = [*(job.warnings or []), problem]
        return _updated(
            session,
            job_id,
            token,
            state=SUCCEEDED,
            phase=None,
            finished_at=datetime.now(UTC),
            **values,
        )


def _evaluate_alerts(session: Session, run_id: int) -> list[int]:
    """Alerts for the new findings, in the analysis transaction; a bug here loses no analysis."""
    try:
        with session.begin_nested():
            return alert_service.evaluate(session=session, run_id=run_id)
    except (OperationalError, InterfaceError):
        raise
    except Exception:
        log.exception("alert evaluation of run %s failed", run_id)
        return []


@dataclass(frozen=True)
class _Source:
    key: str
    kind: str
    name: str
    sha256: str
    project: str
    run_name: str


def _job_source(job: IngestJob) -> _Source:
    return _Source(
        key=job.source_key,
        kind=job.source_kind,
        name=job.source_name,
        sha256=job.source_sha256,
        project=job.project,
        run_name=job.run_name,
    )


def _read(
    settings: Settings,
    tree: SourceTree,
    warnings: Warnings,
    progress: _Progress,
    traces: ingest_parts.ParsedTraces,
) -> ParsedRun:
    ctx = ReadContext(
        tree=tree,
        aliases=AliasTable(settings.metric_aliases),
        warnings=warnings,
        max_line_bytes=settings.max_line_bytes,
        on_bytes=progress,
        samples=traces.traces,
    )
    return read_source(ctx)


def _check_sample_ids(parsed: ParsedRun, warnings: Warnings) -> None:
    if parsed.samples is None or parsed.dataset_size is None or parsed.samples.ids.size == 0:
        return
    top = int(parsed.samples.ids.max())
    if top >= parsed.dataset_size:
        outside = int((parsed.samples.ids >= parsed.dataset_size).sum())
        warnings.add(
            f"samples: {outside} sample id(s) outside the dataset (largest {top}, dataset size"
            f" {parsed.dataset_size})"
        )


def _store(
    session: Session,
    job_id: int,
    token: str,
    source: _Source,
    parsed: ParsedRun,
    layout: RunLayout,
    warnings: Warnings,
    ingest_parts: int = 0,
) -> int:
    """Write the run; the job records its counts (and the parts its trace was parsed in) and
    moves on to analysis."""
    project = _get_or_create_project(session, source.project)
    run = session.scalars(
        select(Run).where(Run.project_id == project.id, Run.name == source.run_name)
    ).one_or_none()
    if run is not None and run.source_sha256 == source.sha256:
        warnings.add("unchanged: this source is identical to the one already ingested for the run")
        counts = dict(_last_counts(session, run.id) or {})
    else:
        if run is None:
            run = Run(
                project_id=project.id,
                name=source.run_name,
                source_format=parsed.source_format,
                status="unknown",
                config={},
            )
            session.add(run)
            session.flush()
        counts = replace_run_data(session, run, parsed, layout)
        run.source_sha256 = source.sha256
        run.verdict = None  # not analysed from this source yet
        run.updated_at = datetime.now(UTC)
    if ingest_parts:
        counts = {**counts, "ingest_parts": ingest_parts}
    session.flush()
    fenced_update(  # last, so the job row is locked only for the commit
        session,
        job_id,
        token,
        run_id=run.id,
        phase="analyzing",
        counts=counts,
        warnings=warnings.summary(),
        error=None,
        progress_done=IngestJob.progress_total,
    )
    return run.id


def _last_counts(session: Session, run_id: int) -> dict[str, Any] | None:
    return session.scalars(
        select(IngestJob.counts)
        .where(IngestJob.run_id == run_id, IngestJob.state == SUCCEEDED)
        .order_by(IngestJob.id.desc())
        .limit(1)
    ).first()


def _get_or_create_project(session: Session, name: str) -> Project:
    project = session.scalars(select(Project).where(Project.name == name)).one_or_none()
    if project is None:
        project = Project(name=name)
        session.add(project)
        session.flush()
    return project


def _refused_by_database(exc: DataError) -> str:
    reason = str(exc.orig or exc).strip().splitlines()[0]
    return f"the database cannot store a value of this source ({reason[:200]})"


def _fail(engine: Engine, job_id: int, token: str, error: str, warnings: Warnings) -> IngestJob:
    with session_scope(engine) as session:
        return _updated(
            session,
            job_id,
            token,
            state=FAILED,
            error=printable(error, 2000),  # no NUL for PostgreSQL, however the error arose
            warnings=warnings.summary(),
            finished_at=datetime.now(UTC),
        )

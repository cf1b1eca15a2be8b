"""Thin task adapters: take ids, call a service. Idempotent, so late acks are safe."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from kombu.exceptions import OperationalError as BrokerUnavailable
from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError, InterfaceError, OperationalError

from app.config import Settings, get_settings
from app.db import get_engine, session_scope
from app.ingest.source import SourceTree
from app.services import (
    alert_delivery,
    analysis_parts,
    ingest_parts,
    job_claims,
    recovery,
    scraping,
    telemetry_store,
)
from app.services import ingest as ingest_service
from app.services import live as live_service
from workers.celery_app import celery_app

log = logging.getLogger(__name__)

RETRYABLE = (OperationalError, InterfaceError, IntegrityError)
INGEST_RETRIES = 8  # 2, 4, 8, 16, 32, 60, 60, 60 s: four minutes of database outage


def ingest_retry_delay(retries: int) -> float:
    return float(min(2 * 2**retries, 60))


@celery_app.task(bind=True, name="runwatch.ingest", max_retries=INGEST_RETRIES)
def ingest(self: Any, job_id: int, claim: str | None = None) -> str:
    """Run one ingest job. The database away, or a concurrent ingest of the same run, retries
    with backoff; the retry carries this try's claim token, so it takes the job back while a
    duplicate of the message cannot. Out of retries, the job is left to the recovery sweep."""
    token = claim or job_claims.new_token()
    try:
        job = ingest_service.run_job(
            engine=get_engine(),
            settings=get_settings(),
            job_id=job_id,
            on_alerts=enqueue_deliveries,
            claim_token=token,
            split=split_analysis,
            split_ingest=split_ingest,
        )
    except RETRYABLE as exc:
        raise self.retry(
            exc=exc,
            kwargs={"job_id": job_id, "claim": token},
            countdown=ingest_retry_delay(self.request.retries),
        ) from exc
    return job.state


def enqueue_ingest(job_id: int, claim: str | None = None, delay: float | None = None) -> None:
    """Call only after the transaction that created the job has committed. A broker that is
    away loses nothing: the job stays queued and the recovery sweep sends it again."""
    try:
        ingest.apply_async((job_id,), {"claim": claim} if claim else None, countdown=delay)
    except BrokerUnavailable as exc:
        log.warning("ingest job %s stays queued, the broker is unavailable: %s", job_id, exc)


def split_ingest(job_id: int, token: str, tree: SourceTree) -> bool:
    """Hand a large sample trace's parse to parts (``ingest_parts``); False: parse it here."""
    return ingest_parts.start(
        engine=get_engine(),
        settings=get_settings(),
        job_id=job_id,
        token=token,
        tree=tree,
        enqueue=enqueue_ingest_parts,
    )


def enqueue_ingest_parts(part_ids: list[int]) -> None:
    """Call only after the transaction that created the parts has committed."""
    for part_id in part_ids:
        ingest_part.delay(part_id)


@celery_app.task(
    name="runwatch.ingest_part",
    autoretry_for=RETRYABLE,
    retry_backoff=2,
    retry_backoff_max=60,
    max_retries=8,
)
def ingest_part(part_id: int) -> str:
    """Parse one byte range of a large sample trace; the last part sends its job back."""
    last = ingest_parts.run_part(engine=get_engine(), settings=get_settings(), part_id=part_id)
    if last is None:
        return "done"
    job_id, token = last
    enqueue_ingest(job_id, claim=token)
    return "last part"


def split_analysis(job_id: int, token: str, run_id: int) -> bool:
    """Hand a large run's analysis to parts (``analysis_parts``); False: analyse it here."""
    return analysis_parts.start(
        engine=get_engine(),
        settings=get_settings(),
        job_id=job_id,
        token=token,
        run_id=run_id,
        enqueue=enqueue_parts,
    )


def enqueue_parts(part_ids: list[int]) -> None:
    """Call only after the transaction that created the parts has committed."""
    for part_id in part_ids:
        analysis_part.delay(part_id)


@celery_app.task(
    name="runwatch.analysis_part",
    autoretry_for=RETRYABLE,
    retry_backoff=2,
    retry_backoff_max=60,
    max_retries=8,
)
def analysis_part(part_id: int) -> str:
    """Summarize one window of a large run's epochs; the last part queues the merge."""
    batch_id = analysis_parts.run_part(
        engine=get_engine(), settings=get_settings(), part_id=part_id
    )
    if batch_id is None:
        return "done"
    analysis_merge.delay(batch_id)
    return "last part"


@celery_app.task(
    name="runwatch.analysis_merge",
    autoretry_for=RETRYABLE,
    retry_backoff=2,
    retry_backoff_max=60,
    max_retries=8,
)
def analysis_merge(batch_id: int) -> str:
    """Merge a large run's analysis parts, store the report and finish its ingest job."""
    job = analysis_parts.merge(
        engine=get_engine(),
        settings=get_settings(),
        batch_id=batch_id,
        on_alerts=enqueue_deliveries,
    )
    return job.state if job is not None else "nothing to merge"


REFRESH_DELAY_SECONDS = 2.0


@celery_app.task(
    name="runwatch.refresh_live",
    autoretry_for=(OperationalError, InterfaceError, IntegrityError),
    retry_backoff=2,
    retry_backoff_max=60,
    max_retries=8,
)
def refresh_live(run_id: int) -> str:
    """Re-ingest and re-analyse a live run from its directory; again later if more arrived."""
    engine, settings = get_engine(), get_settings()
    with session_scope(engine) as session:
        job_id = live_service.start_refresh(session=session, settings=settings, run_id=run_id)
    if job_id is None:
        return "nothing new"
    started = time.monotonic()
    token = job_claims.new_token()
    try:
        job = ingest_service.run_job(
            engine=engine,
            settings=settings,
            job_id=job_id,
            on_alerts=enqueue_deliveries,
            claim_token=token,
        )
    except RETRYABLE:  # the job exists: the ingest task takes it back and retries it
        enqueue_ingest(job_id, claim=token, delay=REFRESH_DELAY_SECONDS)
        return "retrying"
    with session_scope(engine) as session:
        again = live_service.more_pending(session=session, run_id=run_id)
    if again:  # wait at least as long as a refresh takes, so big runs are not reread nonstop
        enqueue_refresh(run_id, delay=max(REFRESH_DELAY_SECONDS, time.monotonic() - started))
    return job.state


def enqueue_refresh(run_id: int, delay: float = REFRESH_DELAY_SECONDS) -> None:
    """A broker that is away loses nothing: the recovery sweep starts the refresh later."""
    try:
        refresh_live.apply_async((run_id,), countdown=delay)
    except BrokerUnavailable as exc:
        log.warning("refresh of live run %s not queued, the broker is unavailable: %s", run_id, exc)


@celery_app.task(name="runwatch.schedule_scrapes", ignore_result=True)
def schedule_scrapes() -> int:
    """Beat, every second: queue a scrape for each node whose interval has passed."""
    with session_scope(get_engine()) as session:
        due = [(n.id, n.interval_s) for n in scraping.due_nodes(session, datetime.now(UTC))]
    for node_id, interval in due:
        scrape_node.apply_async((node_id,), expires=max(interval, 1.0))
    return len(due)


@celery_app.task(
    name="runwatch.scrape_node",
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=1,
    max_retries=3,
    soft_time_limit=30,
)
def scrape_node(node_id: int) -> int:
    """One scrape of one node; a node that is down is recorded, not retried."""
    with session_scope(get_engine()) as session:
        return scraping.scrape_node(session, node_id)


@celery_app.task(name="runwatch.compact_telemetry", autoretry_for=(OperationalError,))
def compact_telemetry() -> dict[str, int]:
    settings = get_settings()
    with session_scope(get_engine()) as session:
        return telemetry_store.compact(session, time.time(), settings.telemetry_retention)


@celery_app.task(
    name="runwatch.deliver_alert",
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=2,
    retry_backoff_max=60,
    max_retries=8,
)
def deliver_alert(delivery_id: int) -> str:
    """One attempt at one alert delivery. A failed send is retried by queueing this task again
    with the delivery's backoff (its state, attempts and due time live in the database)."""
    outcome = alert_delivery.deliver(
        engine=get_engine(), settings=get_settings(), delivery_id=delivery_id
    )
    if outcome.retry_in is not None:
        deliver_alert.apply_async((delivery_id,), countdown=outcome.retry_in)
    return outcome.state


def enqueue_deliveries(delivery_ids: Iterable[int]) -> None:
    """Call only after the transaction that created the deliveries has committed."""
    for delivery_id in delivery_ids:
        deliver_alert.delay(delivery_id)


@celery_app.task(name="runwatch.sweep_alerts", autoretry_for=(OperationalError,))
def sweep_alerts() -> int:
    """Beat, every minute: queue again deliveries whose message was lost or whose worker died."""
    with session_scope(get_engine()) as session:
        due = alert_delivery.sweep(session=session, now=datetime.now(UTC))
    enqueue_deliveries(due)
    return len(due)


@celery_app.task(name="runwatch.recover_jobs", ignore_result=True)
def recover_jobs() -> dict[str, int]:
    """Beat, every ``job_sweep_interval_s``: queue again the ingest jobs a dead worker or a lost
    message left behind, fail those that keep losing their worker, and start live refreshes
    that never came (app/services/recovery.py)."""
    return sweep_jobs(get_engine(), get_settings())


def sweep_jobs(engine: Engine, settings: Settings) -> dict[str, int]:
    """One recovery sweep: commit, then enqueue. The next sweep tries again if the database is
    away."""
    try:
        with session_scope(engine) as session:
            found = recovery.recover(session=session, settings=settings)
    except (OperationalError, InterfaceError) as exc:
        log.warning("job recovery skipped, the database is unavailable: %s", exc)
        return {}
    for job_id in found.to_enqueue:
        enqueue_ingest(job_id)
    return found.summary()

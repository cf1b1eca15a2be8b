"""Thin task adapters: take ids, call a service. Idempotent, so late acks are safe."""

from __future__ import annotations

from sqlalchemy.exc import IntegrityError, InterfaceError, OperationalError

from app.config import get_settings
from app.db import get_engine
from app.services import ingest as ingest_service
from workers.celery_app import celery_app


@celery_app.task(
    name="runwatch.ingest",
    autoretry_for=(OperationalError, InterfaceError, IntegrityError),
    retry_backoff=2,
    retry_backoff_max=60,
    max_retries=8,
)
def ingest(job_id: int) -> str:
    job = ingest_service.run_job(engine=get_engine(), settings=get_settings(), job_id=job_id)
    return job.state


def enqueue_ingest(job_id: int) -> None:
    """Call only after the transaction that created the job has committed."""
    ingest.delay(job_id)

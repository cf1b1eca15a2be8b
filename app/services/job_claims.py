"""Which worker holds an ingest job, and proof that it still does.

A worker takes a job with one conditional UPDATE (``claim``): a queued job, or a running one
whose claim token is the caller's own (a task retrying after a database outage). Every later
write of the job's state goes through ``fenced_update``, which matches the token too, so a
worker that lost the job (the recovery sweep gave it to another after its heartbeat went
stale) can neither overwrite the job nor commit the run's rows: its transaction rolls back.
While it works, a ``Heartbeat`` thread refreshes ``heartbeat_at``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from sqlalchemy import Engine, case, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from app.models import IngestJob

log = logging.getLogger(__name__)

QUEUED, RUNNING = "queued", "running"


class ClaimLost(Exception):
    """This worker no longer holds the job: another one took it over."""

    def __init__(self, job_id: int) -> None:
        super().__init__(f"ingest job {job_id} was taken over by another worker")
        self.job_id = job_id


def new_token() -> str:
    return uuid.uuid4().hex


def worker_name() -> str:
    """host:pid of the process doing the work (a prefork child, not its parent)."""
    return f"{socket.gethostname()}:{os.getpid()}"[:200]


def claim(*, session: Session, job_id: int, token: str, now: datetime | None = None) -> bool:
    """Take the job for ``token``: True when it is now this caller's to run.

    A queued job counts one more attempt; a running job is taken back only by the token that
    already holds it. Anything else (finished, or held by another worker) is refused."""
    now = now or datetime.now(UTC)
    result = session.execute(
        update(IngestJob)
        .where(
            IngestJob.id == job_id,
            (IngestJob.state == QUEUED)
            | ((IngestJob.state == RUNNING) & (IngestJob.claim_token == token)),
        )
        .values(
            attempts=IngestJob.attempts + case((IngestJob.state == QUEUED, 1), else_=0),
            state=RUNNING,
            claim_token=token,
            worker=worker_name(),
            heartbeat_at=now,
            started_at=now,
            phase="reading",
            progress_done=0,
            error=None,
        )
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0) == 1)


def fenced_update(session: Session, job_id: int, token: str, **values: Any) -> None:
    """Update the job only while ``token`` holds it; raises ``ClaimLost`` otherwise (the caller's
    transaction then rolls back). Refreshes the heartbeat as it goes."""
    result = session.execute(
        update(IngestJob)
        .where(
            IngestJob.id == job_id,
            IngestJob.state == RUNNING,
            IngestJob.claim_token == token,
        )
        .values(heartbeat_at=datetime.now(UTC), **values)
        .execution_options(synchronize_session=False)
    )
    if getattr(result, "rowcount", 0) != 1:
        raise ClaimLost(job_id)


class Heartbeat:
    """``with Heartbeat(engine, job_id, token, interval):`` refreshes the job's heartbeat from a
    thread every ``interval`` seconds; ``check()`` raises ``ClaimLost`` once a refresh found
    the job held by someone else. A database error skips a beat (the work itself will fail
    and retry, or the database comes back)."""

    def __init__(self, engine: Engine, job_id: int, token: str, interval: float) -> None:
        self.engine = engine
        self.job_id = job_id
        self.token = token
        self.interval = interval
        self._stop = threading.Event()
        self._lost = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"runwatch-heartbeat-{job_id}", daemon=True
        )

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval + 5)

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def check(self) -> None:
        if self._lost.is_set():
            raise ClaimLost(self.job_id)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                with self.engine.begin() as conn:
                    result = conn.execute(
                        update(IngestJob)
                        .where(
                            IngestJob.id == self.job_id,
                            IngestJob.state == RUNNING,
                            IngestJob.claim_token == self.token,
                        )
                        .values(heartbeat_at=datetime.now(UTC))
                    )
            except SQLAlchemyError as exc:
                log.warning("ingest job %s: heartbeat skipped (%s)", self.job_id, exc)
                continue
            if result.rowcount != 1:
                log.warning("ingest job %s: claim lost; stopping its work", self.job_id)
                self._lost.set()
                return

"""Embedded mode: a real Celery worker consuming the file-system queue from a background thread.

Every embedded worker (thread or ``runwatch worker`` process) holds a shared lock on
``RUNWATCH_HOME/worker.lock``; ``worker_running`` asks whether anyone holds it. The thread runs
no beat, so it runs the job recovery sweep itself (``runwatch worker --beat``, which ``runwatch
serve`` and ``demo`` start, gets it from beat).
"""

from __future__ import annotations

import fcntl
import logging
import socket
import threading
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from celery import Celery
from celery.worker import WorkController

from app.config import Settings
from workers.celery_app import QUEUES

log = logging.getLogger(__name__)


def _lock_path(settings: Settings) -> Path:
    settings.resolved_home.mkdir(parents=True, exist_ok=True)
    return settings.resolved_home / "worker.lock"


def hold_worker_lock(settings: Settings) -> IO[str]:
    """Mark this process as hosting an embedded worker until the returned file is closed."""
    handle = _lock_path(settings).open("a+")
    fcntl.flock(handle, fcntl.LOCK_SH)
    return handle


def worker_running(settings: Settings) -> bool:
    with _lock_path(settings).open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


class _ThreadWorker(WorkController):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.ready = threading.Event()
        super().__init__(*args, **kwargs)

    def on_consumer_ready(self, consumer: Any) -> None:
        self.ready.set()


class _Sweeper:
    """Runs the job recovery sweep now and every ``job_sweep_interval_s`` until stopped."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.interval = settings.job_sweep_interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="runwatch-sweep", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        from app.db import get_engine
        from workers.tasks import sweep_jobs

        engine = get_engine(self.settings.sqlalchemy_url)
        while True:
            try:
                sweep_jobs(engine, self.settings)
            except Exception:  # the broker is away: next time
                log.exception("job recovery sweep failed")
            if self._stop.wait(self.interval):
                return


class EmbeddedWorker:
    """``with EmbeddedWorker(app, settings): ...`` consumes the queue for the block's duration."""

    def __init__(self, app: Celery, settings: Settings, *, loglevel: str = "WARNING") -> None:
        self.app = app
        self.settings = settings
        self.loglevel = loglevel
        self._lock: IO[str] | None = None
        self._worker: _ThreadWorker | None = None
        self._thread: threading.Thread | None = None
        self._sweeper: _Sweeper | None = None

    def __enter__(self) -> EmbeddedWorker:
        self._lock = hold_worker_lock(self.settings)
        self._worker = _ThreadWorker(
            app=self.app,
            hostname=f"embedded-{threading.get_ident()}@{socket.gethostname()}",
            pool_cls="solo",
            concurrency=1,
            loglevel=self.loglevel,
            queues=list(QUEUES),
            without_heartbeat=True,
            without_mingle=True,
            without_gossip=True,
        )
        self._thread = threading.Thread(
            target=self._worker.start, name="runwatch-worker", daemon=True
        )
        self._thread.start()
        if not self._worker.ready.wait(timeout=30):
            raise RuntimeError("the embedded worker did not start within 30 s")
        self._sweeper = _Sweeper(self.settings)
        self._sweeper.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._sweeper is not None:
            self._sweeper.stop()
        if self._worker is not None:
            self._worker.stop(in_sighandler=False)
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self._lock is not None:
            self._lock.close()

"""Streams a run's records to a Runwatch server from a background thread (standard library only).

Protocol::

    POST {server}/api/v1/runs              {"project", "name", "config"}            -> {"id", ...}
    POST {server}/api/v1/runs/{id}/events  {"logger", "batch", "records": [...]}    -> 202

Batch numbers count up from 1 per logger; the server ignores a (logger, batch) it already has, so
a batch is retried until it is acknowledged. Requests carry ``Authorization: Bearer <token>``: the
token given, else the ``RUNWATCH_TOKEN`` environment variable. A refusal (401: no or a bad
token; 403: a token without write scope on the project; any other 4xx) is not retried.

Nothing here blocks or raises into the caller: the queue is bounded (the oldest unsent records
are dropped and counted when it is full) and every network failure only updates the counters.
The run directory on disk stays complete either way.
"""

from __future__ import annotations

import ipaddress
import json
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

RETRYABLE_STATUS = frozenset({408, 425, 429})
TOKEN_ENV = "RUNWATCH_TOKEN"
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})


@dataclass(frozen=True)
class StreamStatus:
    sent: int  # records the server acknowledged
    dropped: int  # records dropped unsent: the queue was full, or close() gave up on them
    rejected: int  # records in batches the server refused (4xx); not retried
    pending: int  # records queued or in flight
    last_error: str | None
    run_id: int | None


class Rejected(Exception):
    """The server refused a request (4xx): retrying the same request will not help."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class StreamClient:
    """Sends queued records in numbered batches; :meth:`submit` never blocks on the network."""

    def __init__(
        self,
        server: str,
        *,
        project: str,
        name: str,
        config: Mapping[str, Any] | None = None,
        token: str | None = None,
        logger_id: str,
        batch_size: int = 500,
        interval: float = 1.0,
        max_queue: int = 100_000,
        initial_backoff: float = 0.5,
        max_backoff: float = 30.0,
        request_timeout: float = 10.0,
        close_timeout: float = 5.0,
    ) -> None:
        if batch_size < 1 or max_queue < 1:
            raise ValueError("batch_size and max_queue must be at least 1")
        self.server = server.rstrip("/")
        self.project = project
        self.name = name
        self.config = json.loads(json.dumps(dict(config or {}), default=str))
        self.token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        self.logger_id = logger_id
        self.batch_size = batch_size
        self.interval = interval
        self.max_queue = max_queue
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.request_timeout = request_timeout
        self.close_timeout = close_timeout
        self._opener = _opener(self.server)
        self._queue: deque[str] = deque()
        self._cond = threading.Condition()
        self._wake = threading.Event()  # interrupts a backoff wait
        self._closing = False
        self._abandoned = False
        self._flushing = 0
        self._deadline: float | None = None
        self._in_flight = 0
        self._batch_no = 0
        self._sent = 0
        self._dropped = 0
        self._rejected = 0
        self._last_error: str | None = None
        self.run_id: int | None = None
        self._thread = threading.Thread(target=self._run, name="runwatch-stream", daemon=True)
        self._thread.start()

    # -- caller side --------------------------------------------------------------------------

    def submit(self, record: Mapping[str, Any]) -> None:
        """Queue one record. Never blocks: when the queue is full the oldest record goes."""
        self.submit_json(json.dumps(record, separators=(",", ":"), default=str))

    def submit_json(self, record: str) -> None:
        """Queue one record already encoded as a JSON object. Encoded records keep a long queue
        out of the garbage collector's way (no pauses in the training loop)."""
        with self._cond:
            if self._closing:
                self._dropped += 1
                return
            if len(self._queue) >= self.max_queue:
                self._queue.popleft()
                self._dropped += 1
            self._queue.append(record)
            size = len(self._queue)
            if size == 1 or size == self.batch_size:
                self._cond.notify_all()

    def status(self) -> StreamStatus:
        with self._cond:
            return StreamStatus(
                sent=self._sent,
                dropped=self._dropped,
                rejected=self._rejected,
                pending=len(self._queue) + self._in_flight,
                last_error=self._last_error,
                run_id=self.run_id,
            )

    @property
    def sent(self) -> int:
        return self.status().sent

    @property
    def dropped(self) -> int:
        return self.status().dropped

    @property
    def last_error(self) -> str | None:
        return self.status().last_error

    def flush(self, timeout: float | None = None) -> bool:
        """Send what is queued now, waiting up to ``timeout`` s; True when nothing is left."""
        wait = self.close_timeout if timeout is None else timeout
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
            try:
                return self._cond.wait_for(self._drained, timeout=wait)
            finally:
                self._flushing -= 1

    def close(self, timeout: float | None = None) -> bool:
        """Stop accepting records, send what is queued for up to ``timeout`` s (default
        ``close_timeout``) and stop the thread. True when everything was sent or refused."""
        wait = self.close_timeout if timeout is None else timeout
        with self._cond:
            if not self._closing:
                self._closing = True
                self._deadline = time.monotonic() + wait
            self._cond.notify_all()
        self._wake.set()
        self._thread.join(max(0.0, wait))
        with self._cond:
            done = self._drained()
            if self._thread.is_alive() and not self._abandoned:
                # Give up now: what is unsent counts as dropped, and the thread stops at its next
                # check without touching the counters again.
                self._abandoned = True
                self._deadline = time.monotonic()
                self._dropped += len(self._queue) + self._in_flight
                self._queue.clear()
                self._in_flight = 0
        return done

    # -- sender thread ------------------------------------------------------------------------

    def _drained(self) -> bool:
        return not self._queue and self._in_flight == 0

    def _run(self) -> None:
        while True:
            taken = self._take()
            if taken is None:
                return
            number, records = taken
            try:
                self._deliver(number, records)
            except Exception as exc:  # never let the thread die
                self._fail(records, f"{type(exc).__name__}: {exc}", dropped=True)
            finally:
                with self._cond:
                    self._in_flight = 0
                    self._cond.notify_all()

    def _take(self) -> tuple[int, list[str]] | None:
        with self._cond:
            while not self._queue and not self._closing:
                self._cond.wait()
            if not self._queue:
                return None
            if len(self._queue) < self.batch_size and not self._closing and not self._flushing:
                self._cond.wait_for(
                    lambda: len(self._queue) >= self.batch_size or self._closing or self._flushing,
                    timeout=self.interval,
                )
            count = min(self.batch_size, len(self._queue))
            records = [self._queue.popleft() for _ in range(count)]
            self._batch_no += 1
            self._in_flight = count
            return self._batch_no, records

    def _deliver(self, number: int, records: list[str]) -> None:
        head = json.dumps({"logger": self.logger_id, "batch": number})[:-1]
        payload = f'{head}, "records": [{",".join(records)}]}}'.encode()
        delay = self.initial_backoff
        while True:
            if self._past_deadline():
                self._fail(records, self._last_error or "closed before sent", dropped=True)
                return
            try:
                if self.run_id is None:
                    self.run_id = self._create_run()
                self._post(f"/api/v1/runs/{self.run_id}/events", payload)
            except Rejected as exc:
                if exc.status == 404:
                    self.run_id = None  # the run is gone: create it again for the next batch
                self._fail(records, str(exc), dropped=False)
                return
            except Exception as exc:
                with self._cond:
                    self._last_error = _describe(exc)
            else:
                with self._cond:
                    if not self._abandoned:
                        self._sent += len(records)
                return
            with self._cond:
                closing = self._closing
            if not closing:
                self._wake.wait(delay)
                delay = min(delay * 2, self.max_backoff)
            else:
                time.sleep(min(0.2, delay))

    def _create_run(self) -> int:
        body = {"project": self.project, "name": self.name, "config": self.config}
        answer = self._post("/api/v1/runs", json.dumps(body).encode())
        run_id = answer.get("id") if isinstance(answer, dict) else None
        if type(run_id) is not int:
            raise ValueError(f"run creation answered without an integer id: {answer!r:.200}")
        return run_id

    def _post(self, path: str, payload: bytes) -> Any:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(
            self.server + path, data=payload, headers=headers, method="POST"
        )
        try:
            with self._opener.open(request, timeout=self._request_timeout()) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            detail = _error_detail(exc)
            message = f"HTTP {exc.code} from {path}{detail}"
            if 400 <= exc.code < 500 and exc.code not in RETRYABLE_STATUS:
                raise Rejected(message, exc.code) from None
            raise ConnectionError(message) from None
        return json.loads(raw) if raw.strip() else None

    def _request_timeout(self) -> float:
        with self._cond:
            deadline = self._deadline
        if deadline is None:
            return self.request_timeout
        return max(0.05, min(self.request_timeout, deadline - time.monotonic()))

    def _past_deadline(self) -> bool:
        with self._cond:
            return self._deadline is not None and time.monotonic() >= self._deadline

    def _fail(self, records: list[str], error: str, *, dropped: bool) -> None:
        with self._cond:
            if self._abandoned:
                return
            if dropped:
                self._dropped += len(records)
            else:
                self._rejected += len(records)
            self._last_error = error


def _opener(server: str) -> urllib.request.OpenerDirector:
    """Loopback servers are reached directly, whatever the proxy environment says."""
    host = urllib.parse.urlsplit(server).hostname or ""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host in LOOPBACK_NAMES
    if loopback:
        return urllib.request.build_opener(urllib.request.ProxyHandler({}))
    return urllib.request.build_opener()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError):
        return f"cannot reach server: {exc.reason}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _error_detail(exc: urllib.error.HTTPError) -> str:
    """``: <message>`` from the server's ``{"error": {"message"}}`` body (else its first bytes)."""
    try:
        text = exc.read(4096).decode("utf-8", "replace").strip()
    except Exception:
        return ""
    try:
        message = json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return f": {text[:300]}" if text else ""
    return f": {str(message)[:300]}"

"""Streaming to a loopback server that speaks the run-stream protocol (and fails on demand)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from app.tracking import RunLogger
from app.tracking.stream import StreamClient

FAST = {"interval": 0.05, "initial_backoff": 0.05, "max_backoff": 0.2}


class FakeServer:
    """``POST /api/v1/runs`` and ``POST /api/v1/runs/{id}/events``, deduplicating batches.

    ``failures``: how many event requests fail first, and how: ``"503"`` answers 503,
    ``"drop"`` closes the connection without answering, ``"apply_then_drop"`` stores the batch
    and then closes the connection (so the client retries a batch the server already has).
    ``token``: the one accepted (401 otherwise); ``project``: the one it reaches (403 otherwise).
    Refusals carry Runwatch's error body, ``{"error": {"status", "code", "message", ...}}``.
    """

    def __init__(
        self,
        port: int = 0,
        *,
        token: str | None = None,
        project: str | None = None,
        failures: int = 0,
        mode: str = "503",
    ) -> None:
        self.token = token
        self.project = project
        self.failures = failures
        self.mode = mode
        self.lock = threading.Lock()
        self.runs: dict[tuple[str, str], int] = {}
        self.run_bodies: list[dict[str, Any]] = []
        self.seen: set[tuple[str, int]] = set()
        self.batches: list[dict[str, Any]] = []  # accepted, in arrival order
        self.attempts: list[tuple[str, int]] = []  # every events request's (logger, batch)
        self.auth: list[str | None] = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    @property
    def records(self) -> list[dict[str, Any]]:
        with self.lock:
            return [r for b in self.batches for r in b["records"]]

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                header = self.headers.get("Authorization")
                with owner.lock:
                    owner.auth.append(header)
                if owner.token is not None and header != f"Bearer {owner.token}":
                    return self._error(401, "invalid or revoked token")
                if self.path == "/api/v1/runs":
                    if owner.project is not None and body["project"] != owner.project:
                        return self._error(
                            403, f"this token does not reach project {body['project']!r}"
                        )
                    with owner.lock:
                        key = (body["project"], body["name"])
                        run_id = owner.runs.setdefault(key, len(owner.runs) + 1)
                        owner.run_bodies.append(body)
                    return self._answer(200, {"id": run_id, "project": key[0], "name": key[1]})
                if self.path.startswith("/api/v1/runs/") and self.path.endswith("/events"):
                    return self._events(body)
                return self._error(404, "no such route")

            def _events(self, body: dict[str, Any]) -> None:
                key = (body["logger"], body["batch"])
                with owner.lock:
                    owner.attempts.append(key)
                    fail = owner.failures > 0
                    owner.failures -= 1 if fail else 0
                    if fail and owner.mode == "503":
                        return self._error(503, "busy")
                    if fail and owner.mode == "drop":
                        self.close_connection = True
                        return None
                    fresh = key not in owner.seen
                    if fresh:
                        owner.seen.add(key)
                        owner.batches.append(body)
                if fail:  # apply_then_drop
                    self.close_connection = True
                    return None
                return self._answer(202, {"accepted": len(body["records"]) if fresh else 0})

            def _error(self, status: int, message: str) -> None:
                error = {"status": status, "code": "x", "message": message, "details": []}
                return self._answer(status, {"error": error})

            def _answer(self, status: int, doc: dict[str, Any]) -> None:
                raw = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        return Handler


@pytest.fixture(autouse=True)
def _no_token_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUNWATCH_TOKEN", raising=False)


@pytest.fixture
def server() -> Iterator[FakeServer]:
    srv = FakeServer()
    yield srv
    srv.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(predicate: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_records_arrive_in_order_in_numbered_batches(server: FakeServer, tmp_path: Path) -> None:
    options = {**FAST, "batch_size": 100, "interval": 5.0}
    log = RunLogger(
        tmp_path / "run",
        project="proj",
        name="exp",
        server=server.url,
        token="secret",
        config={"lr": 0.1},
        stream_options=options,
    )
    log.start()
    for step in range(1, 251):
        log.metrics(step, loss=1.0 / step)
    log.exit(250)
    log.close()

    assert server.run_bodies[0] == {"project": "proj", "name": "exp", "config": {"lr": 0.1}}
    assert set(server.auth) == {"Bearer secret"}
    assert [b["batch"] for b in server.batches] == [1, 2, 3]
    assert [len(b["records"]) for b in server.batches] == [100, 100, 53]
    assert {b["logger"] for b in server.batches} == {log.logger_id}
    records = server.records
    assert records[0] == {"file": "config", "data": {"lr": 0.1}}
    assert records[1]["data"]["event"] == "process_start"
    metrics = [r["data"] for r in records if r["file"] == "metrics"]
    assert metrics == lines(tmp_path / "run" / "metrics.jsonl")  # the exact lines on disk
    assert records[-1]["data"]["event"] == "process_exit"
    status = log.stream_status
    assert status is not None
    assert (status.sent, status.dropped, status.pending) == (253, 0, 0)


def test_partial_batch_is_sent_after_the_interval(server: FakeServer, tmp_path: Path) -> None:
    with RunLogger(tmp_path, server=server.url, stream_options=FAST) as log:
        log.metrics(1, loss=2.0)
        assert wait_for(lambda: len(server.records) == 1, timeout=2.0)
        assert server.records[0]["data"]["loss"] == 2.0


def test_checkpoint_and_sampler_state_are_streamed(server: FakeServer, tmp_path: Path) -> None:
    weights = tmp_path / "model.pt"
    weights.write_bytes(b"x" * 10)
    with RunLogger(tmp_path / "run", server=server.url, stream_options=FAST) as log:
        state = {"seed": 3, "shuffle": True, "epoch": 1, "consumed_in_epoch": 8}
        log.checkpoint("step_4", 4, components={"model": weights}, data_state=state)
    [record] = [r for r in server.records if r["file"] == "checkpoint"]
    assert record["name"] == "step_4"
    assert record["manifest"]["components"]["model"]["bytes"] == 10
    assert record["extra"] == {"sampler.json": state}


@pytest.mark.parametrize("mode", ["503", "drop", "apply_then_drop"])
def test_failed_requests_are_retried_and_applied_once(tmp_path: Path, mode: str) -> None:
    server = FakeServer(failures=2, mode=mode)
    try:
        options = {**FAST, "batch_size": 10, "interval": 5.0}
        with RunLogger(tmp_path, server=server.url, stream_options=options) as log:
            for step in range(1, 31):
                log.metrics(step, loss=float(step))
        steps = [r["data"]["step"] for r in server.records if r["file"] == "metrics"]
        assert steps == list(range(1, 31))
        assert [b["batch"] for b in server.batches] == [1, 2, 3, 4]  # 30 metrics + the exit
        assert server.attempts[:3] == [(log.logger_id, 1)] * 3  # the same batch, retried
        status = log.stream_status
        assert status is not None and status.sent == 31 and status.dropped == 0
    finally:
        server.stop()


def test_server_down_at_start_then_up(tmp_path: Path) -> None:
    port = free_port()
    log = RunLogger(tmp_path, server=f"http://127.0.0.1:{port}", stream_options=FAST)
    worst = 0.0
    log.start()
    for step in range(1, 2001):
        began = time.perf_counter()
        log.metrics(step, loss=1.0, lr=0.1, grad_norm=0.5, epoch=0)
        log.samples(step, list(range(step * 8, step * 8 + 8)))
        worst = max(worst, time.perf_counter() - began)
    status = log.stream_status
    assert status is not None and status.sent == 0
    assert status.last_error is not None and "cannot reach server" in status.last_error
    server = FakeServer(port)
    try:
        assert wait_for(lambda: len(server.records) == 4001)
        began = time.perf_counter()
        log.exit()
        log.close()
        worst = max(worst, time.perf_counter() - began)
        assert [r["data"]["step"] for r in server.records if r["file"] == "metrics"] == list(
            range(1, 2001)
        )
    finally:
        server.stop()
    assert worst < 0.05, f"a logger call blocked for {worst * 1000:.1f} ms"


def test_server_never_up_close_returns_within_timeout(tmp_path: Path) -> None:
    log = RunLogger(tmp_path, server=f"http://127.0.0.1:{free_port()}", stream_options=FAST)
    for step in range(1, 101):
        log.metrics(step, loss=1.0)
    began = time.monotonic()
    log.close(timeout=0.5)
    assert time.monotonic() - began < 1.5
    status = log.stream_status
    assert status is not None and status.sent == 0 and status.dropped == 100
    assert len(lines(tmp_path / "metrics.jsonl")) == 100  # the disk copy is complete


def test_full_queue_drops_the_oldest_records(tmp_path: Path) -> None:
    port = free_port()
    options = {**FAST, "max_queue": 20, "batch_size": 5}
    log = RunLogger(tmp_path, server=f"http://127.0.0.1:{port}", stream_options=options)
    for step in range(1, 201):
        log.metrics(step, loss=1.0)
    server = FakeServer(port)
    try:
        log.close(timeout=5.0)
        steps = [r["data"]["step"] for r in server.records]
        assert steps == sorted(steps) and steps[-20:] == list(range(181, 201))
        status = log.stream_status
        assert status is not None
        assert status.dropped + status.sent == 200 and status.dropped >= 175
    finally:
        server.stop()


def test_bad_token_is_not_retried_and_disk_stays_complete(tmp_path: Path) -> None:
    server = FakeServer(token="right")
    try:
        options = {**FAST, "batch_size": 10, "interval": 5.0}
        with RunLogger(tmp_path, server=server.url, token="wrong", stream_options=options) as log:
            for step in range(1, 51):
                log.metrics(step, loss=1.0)
        status = log.stream_status
        assert status is not None and status.last_error is not None
        assert status.last_error.startswith("HTTP 401 from /api/v1/runs")
        assert status.last_error.endswith(": invalid or revoked token")  # the server's message
        assert status.rejected == 51 and status.sent == 0
        assert len(server.auth) == 6  # one refused request per batch, no retries
        assert server.records == []
        assert len(lines(tmp_path / "metrics.jsonl")) == 50
    finally:
        server.stop()


def test_token_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RUNWATCH_TOKEN", "rwt_from_env")
    server = FakeServer(token="rwt_from_env")
    try:
        with RunLogger(tmp_path, server=server.url, stream_options=FAST) as log:
            log.metrics(1, loss=1.0)
        assert set(server.auth) == {"Bearer rwt_from_env"}
        assert [r["data"]["step"] for r in server.records if r["file"] == "metrics"] == [1]
        explicit = StreamClient(server.url, project="p", name="n", token="given", logger_id="x")
        assert explicit.token == "given"  # a token passed in wins over the environment
        explicit.close(timeout=0.1)
    finally:
        server.stop()


def test_other_project_refused_with_403_is_not_retried(tmp_path: Path) -> None:
    server = FakeServer(token="t", project="mine")
    try:
        options = {**FAST, "batch_size": 10, "interval": 5.0}
        with RunLogger(
            tmp_path, server=server.url, token="t", project="theirs", stream_options=options
        ) as log:
            for step in range(1, 21):
                log.metrics(step, loss=1.0)
        status = log.stream_status
        assert status is not None and status.last_error is not None
        assert status.last_error == (
            "HTTP 403 from /api/v1/runs: this token does not reach project 'theirs'"
        )
        assert status.rejected == 21 and status.sent == 0
        assert len(server.auth) == 3  # one refused run creation per batch
        assert len(lines(tmp_path / "metrics.jsonl")) == 20
    finally:
        server.stop()


def test_submit_after_close_is_counted_not_raised(server: FakeServer) -> None:
    client = StreamClient(server.url, project="p", name="n", logger_id="abc", **FAST)
    client.submit({"file": "metrics", "data": {"step": 1}})
    assert client.close(timeout=2.0)
    client.submit({"file": "metrics", "data": {"step": 2}})
    assert (client.sent, client.dropped) == (1, 1)

"""`runwatch serve` stopped with SIGTERM (as systemd, Docker or a job scheduler stop it) stops
its worker child too, instead of leaving it running."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.procs import background, free_port, runwatch_env, wait_http

pytestmark = pytest.mark.integration


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ", 1)[1][0] != "Z"


def test_sigterm_stops_serve_and_its_worker(tmp_path: Path) -> None:
    env = runwatch_env(home=str(tmp_path / "home"))
    port = free_port()
    log = tmp_path / "serve.log"
    with background(["serve", "--port", str(port), "--worker"], env, log) as proc:
        wait_http(f"http://127.0.0.1:{port}/api/v1/health", proc, log)
        workers = _children(proc.pid)
        assert workers, "serve started no worker"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        deadline = time.monotonic() + 30
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(w) for w in workers), log.read_text()

"""Load: 50 concurrent uploads while readers hit the API and the dashboard, through uvicorn
and real workers on both stacks. No request may fail; every job must succeed; latencies are
printed (run with -s) for the record."""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path

import pytest

from bench.load import run_load
from tests.procs import background, free_port, wait_http

pytestmark = pytest.mark.integration

UPLOADS = 50
RUNS = ("exact_resume", "megatron_offset", "stall_on_save", "clean", "fresh_seed")


def test_fifty_concurrent_uploads_with_reads(
    service_env: dict[str, str],
    api_token: str,
    example_runs: Path,
    tmp_path: Path,
    backend: str,
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    embedded = backend == "sqlite"
    server_log = tmp_path / "server.log"
    serve = ["serve", "--port", str(port), "--worker" if embedded else "--no-worker"]
    with ExitStack() as stack:
        server = stack.enter_context(background(serve, service_env, server_log))
        if not embedded:  # the production shape: the API and a separate worker process
            stack.enter_context(background(["worker"], service_env, tmp_path / "worker.log"))
        wait_http(f"{base}/api/v1/health", server, server_log)
        result = run_load(
            base,
            api_token,
            [example_runs / name for name in RUNS],
            uploads=UPLOADS,
            readers=6,
            min_seconds=20,
            timeout=240,
        )
        assert server.poll() is None
    summary = result.summary()
    print(f"\nload on {backend}: {json.dumps(summary)}")
    assert result.errors == []
    assert result.uploads == UPLOADS
    assert result.jobs == {"succeeded": UPLOADS}
    for kind in ("runs list", "verdict", "findings", "metric", "dashboard page"):
        assert summary["requests"][kind]["requests"] > 10, (kind, summary["requests"])

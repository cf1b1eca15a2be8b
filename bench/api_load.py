"""The API under load: verdict and runs-list requests per second, p50 and p99, from wrk.

The twelve example runs (``tests/data/example_runs.tar.gz``) are ingested into SQLite, a read
token is made with ``runwatch tokens create --scope read --json``, ``runwatch serve --no-worker``
serves them (uvicorn, one process and then one per core), and ``wrk -t2 -c32 -d10s --latency``
sends each endpoint its requests with the token, on loopback. wrk shares the two cores with the
server, as a client on the same machine does. Needs wrk (Debian: apt-get install wrk).
Run: python -m bench api_load [--quick]
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.common import Row, Scale, in_child

EXAMPLES = Path(__file__).resolve().parent.parent / "tests" / "data" / "example_runs.tar.gz"
TARGET_RPS = 2000
TARGET_P99_MS = 20.0
VERDICT_RUN = "fresh_seed"


def prepare(home: str) -> dict[str, Any]:
    """Child: ingest the example runs into the SQLite database under ``home``."""
    os.environ["RUNWATCH_HOME"] = home
    os.environ["RUNWATCH_DATABASE_URL"] = f"sqlite:///{home}/runwatch.db"
    from app import migrate
    from app.config import get_settings
    from app.db import get_engine, session_scope
    from app.services import ingest as ingest_service
    from app.services.sources import store_path

    settings = get_settings()
    engine = get_engine()
    migrate.upgrade(engine)
    with tarfile.open(EXAMPLES) as tar:
        tar.extractall(home, filter="data")
    runs: dict[str, int] = {}
    for folder in sorted((Path(home) / "runs").iterdir()):
        source = store_path(folder, settings)
        with session_scope(engine) as session:
            job_id = ingest_service.submit(
                session=session, source=source, project="examples", run_name=folder.name
            ).id
        job = ingest_service.run_job(engine=engine, settings=settings, job_id=job_id)
        assert job.state == "succeeded", job.error
        runs[folder.name] = job.run_id or 0
    return {"runs": runs}


def run(scale: Scale) -> list[Row]:
    if shutil.which("wrk") is None:
        return [Row("API under load (wrk)", "skipped: wrk is not installed (apt-get install wrk)")]
    home = tempfile.mkdtemp(prefix="runwatch-bench-")
    try:
        return _run(scale, home)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _run(scale: Scale, home: str) -> list[Row]:
    runs = in_child("bench.api_load:prepare", home=home)["runs"]
    env = {
        **os.environ,
        "RUNWATCH_HOME": home,
        "RUNWATCH_DATABASE_URL": f"sqlite:///{home}/runwatch.db",
        "RUNWATCH_ADMIN_TOKEN_FILE": f"{home}/admin-token",
    }
    made = subprocess.run(
        [sys.executable, "-m", "app", "tokens", "create", "bench", "--scope", "read", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    token = json.loads(made.stdout.strip().splitlines()[-1])["token"]
    paths = {"verdict": f"/api/v1/runs/{runs[VERDICT_RUN]}/verdict", "runs list": "/api/v1/runs"}
    rows = []
    for workers in [1] if scale.quick else sorted({1, os.cpu_count() or 1}):
        for name, result in _serve_and_load(env, workers, paths, token, scale).items():
            met = None
            target = "-"
            if name == "verdict":
                target = f"≥ {TARGET_RPS:,} req/s, p99 ≤ {TARGET_P99_MS:g} ms"
                met = result["rps"] >= TARGET_RPS and result["p99_ms"] <= TARGET_P99_MS
            rows.append(
                Row(
                    f"API {name}, serve --workers {workers}: wrk -t2"
                    f" -c{scale.wrk_connections} -d{scale.wrk_seconds}s",
                    f"{result['rps']:,.0f} req/s, p50 {result['p50_ms']:.1f} ms,"
                    f" p99 {result['p99_ms']:.1f} ms",
                    target=target,
                    met=met,
                    details={"runwatch": result, "url": paths[name], "workers": workers},
                )
            )
    return rows


def _serve_and_load(
    env: dict[str, str], workers: int, paths: dict[str, str], token: str, scale: Scale
) -> dict[str, dict[str, Any]]:
    """Start ``runwatch serve --no-worker --workers N``, load each path with wrk, stop it."""
    port = _free_port()
    cmd = [sys.executable, "-m", "app", "serve", "--no-worker", "--port", str(port)]
    server = subprocess.Popen(
        [*cmd, "--workers", str(workers)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_healthy(base, server)
        results = {}
        for name, path in paths.items():
            for _ in range(2 * workers):  # warm every worker: pools open, lazy imports done
                _get(base + path, token)
            results[name] = _wrk(base + path, token, scale)
        return results
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _wrk(url: str, token: str, scale: Scale) -> dict[str, Any]:
    cmd = [
        "wrk",
        "-t2",
        f"-c{scale.wrk_connections}",
        f"-d{scale.wrk_seconds}s",
        "--latency",
        "-H",
        f"Authorization: Bearer {token}",
        url,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return parse_wrk(out)


def parse_wrk(out: str) -> dict[str, Any]:
    """Requests/s, the latency percentiles, and the error counts from wrk's text."""
    result: dict[str, Any] = {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out)[1])}  # type: ignore[index]
    for pct, value, unit in re.findall(r"^\s+(50|75|90|99)%\s+([\d.]+)(us|ms|s)\s*$", out, re.M):
        scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]
        result[f"p{pct}_ms"] = float(value) * scale
    total = re.search(r"(\d+) requests in", out)
    result["requests"] = int(total[1]) if total else None
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    result["non_2xx"] = int(non2xx[1]) if non2xx else 0
    errors = re.search(r"Socket errors: (.*)", out)
    result["socket_errors"] = errors[1].strip() if errors else None
    if result["non_2xx"]:
        raise RuntimeError(f"wrk got {result['non_2xx']} error responses:\n{out}")
    return result


def _get(url: str, token: str) -> bytes:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        body: bytes = response.read()
        return body


def _wait_healthy(base: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            err = server.stderr.read().decode() if server.stderr else ""
            raise RuntimeError(f"runwatch serve exited {server.returncode}:\n{err[-2000:]}")
        try:
            with urllib.request.urlopen(f"{base}/api/v1/health", timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("runwatch serve did not answer within 60 s")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port

"""The compose stack's processes, without Docker: the commands and replica counts are read from
docker/compose.yaml (with docker/.env.example), run against a fresh PostgreSQL database, Redis
and one shared source directory. The one-shot migration goes first; then the API, two ingest
workers, the telemetry and alerts workers and beat. Twelve labelled runs are uploaded at once;
each must end with the findings its truth.json calls for, spread over both ingest workers, while
beat keeps a node scraped and the alerts worker delivers the alerts for the failed runs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from sqlalchemy import create_engine, func, select, text

from app.analysis.truth import score
from app.db import make_engine, session_scope
from app.models import AlertDelivery, Run
from tests.alerts.receivers import http_receiver
from tests.conftest import PG_ADMIN_URL, REDIS_URL
from tests.deploy.compose import Service, load, read_env_file, runwatch_services
from tests.helpers import count_source, expected_verdict, stored_counts
from tests.procs import background, free_port, runwatch, runwatch_env, wait_for_log, wait_http

pytestmark = pytest.mark.integration

PROJECT = "deploy"
SUCCEEDED = re.compile(r"Task (runwatch\.\w+)\[([0-9a-f-]+)\] succeeded")
EXPORTER_BODY = b"""# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-0a",modelName="NVIDIA H100",Hostname="gpu-node-1"} 97
"""


@pytest.fixture
def fresh_database() -> Iterator[str]:
    """An empty PostgreSQL database: the stack's own migration step creates the schema."""
    name = f"runwatch_deploy_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"),
                {"n": name},
            )
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()


@pytest.fixture
def exporter() -> Iterator[tuple[str, list[float]]]:
    """A dcgm-exporter stand-in on loopback, remembering when it was scraped."""
    hits: list[float] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(time.time())
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(EXPORTER_BODY)))
            self.end_headers()
            self.wfile.write(EXPORTER_BODY)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics", hits
    finally:
        server.shutdown()
        server.server_close()


def stack_env(service: Service, home: Path, **overrides: str) -> dict[str, str]:
    """The service's environment as compose gives it (env file, then the shared anchor), with
    the addresses of this machine's database, broker and source directory instead."""
    env = {**read_env_file(), **service.environment}
    prefix = "RUNWATCH_"
    settings = {k[len(prefix) :].lower(): v for k, v in env.items() if k.startswith(prefix)}
    settings.update(home=str(home), **overrides)
    others = {k: v for k, v in env.items() if not k.startswith(prefix)}
    return {**runwatch_env(**settings), **others}


def loopback(command: list[str]) -> list[str]:
    """Listen on loopback here rather than every interface as in the container."""
    out = list(command)
    if "--host" in out:
        out[out.index("--host") + 1] = "127.0.0.1"
    return out


def wait_until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.2)
    raise TimeoutError(what)


def tar_each(run_dirs: list[Path], folder: Path) -> list[Path]:
    folder.mkdir()
    for run_dir in run_dirs:
        with tarfile.open(folder / f"{run_dir.name}.tar.gz", "w:gz") as tar:
            tar.add(run_dir, arcname=run_dir.name)
    return [folder / f"{run_dir.name}.tar.gz" for run_dir in run_dirs]


def succeeded_tasks(log: Path) -> dict[str, set[str]]:
    """Task name -> ids of the tasks this worker finished, from its Celery log."""
    out: dict[str, set[str]] = {}
    for name, task_id in SUCCEEDED.findall(log.read_text(errors="replace")):
        out.setdefault(name, set()).add(task_id)
    return out


def test_compose_processes_ingest_and_analyse_runs_concurrently(
    fresh_database: str,
    example_runs: Path,
    exporter: tuple[str, list[float]],
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    services = runwatch_services(load(read_env_file()))
    runs = sorted(example_runs.iterdir())
    archives = tar_each(runs, tmp_path / "uploads")
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    client.close()

    api_port = free_port()
    common = {
        "database_url": fresh_database,
        "broker_url": REDIS_URL,
        "source_dir": str(tmp_path / "sources"),  # the shared volume
        "api_port": str(api_port),
        "webhook_allow_private": "true",  # the alert receiver is on loopback
    }
    migrate = services.pop("migrate")
    migrated = runwatch(*migrate.command, env=stack_env(migrate, tmp_path / "migrate", **common))
    assert migrated.returncode == 0, migrated.stderr
    assert "database at revision" in migrated.stdout
    admin_env = stack_env(services["api"], tmp_path / "admin", **common)
    made = runwatch("tokens", "create", "deploy-test", "--scope", "admin", "--json", env=admin_env)
    assert made.returncode == 0, made.stderr
    token = json.loads(made.stdout)["token"]

    assert [(s.name, s.replicas) for s in services.values()] == [
        ("api", 1),
        ("worker", 2),
        ("telemetry-worker", 1),
        ("alerts-worker", 1),
        ("beat", 1),
    ]
    logs: dict[str, list[Path]] = {}
    with ExitStack() as stack, http_receiver() as receiver:
        procs = {}
        for service in services.values():
            for i in range(service.replicas):
                log = tmp_path / "logs" / f"{service.name}-{i + 1}.log"
                log.parent.mkdir(exist_ok=True)
                env = stack_env(service, tmp_path / "home" / f"{service.name}-{i + 1}", **common)
                procs[log] = stack.enter_context(background(loopback(service.command), env, log))
                logs.setdefault(service.name, []).append(log)
        base = f"http://127.0.0.1:{api_port}"
        (api_log,) = logs["api"]
        wait_http(f"{base}/api/v1/health", procs[api_log], api_log)
        for name in ("worker", "telemetry-worker", "alerts-worker"):
            for log in logs[name]:
                wait_for_log(log, "ready", procs[log])
        (beat_log,) = logs["beat"]
        wait_for_log(beat_log, "beat: Starting", procs[beat_log])
        ready = time.monotonic()

        auth = {"Authorization": f"Bearer {token}"}
        api = stack.enter_context(httpx.Client(base_url=base, headers=auth, timeout=60))
        exporter_url, hits = exporter
        node = api.post(
            "/api/v1/nodes",
            json={"name": "gpu-node-1", "url": exporter_url, "interval_s": 1, "timeout_s": 1},
        )
        assert node.status_code == 201, node.text
        channel = api.post(
            "/api/v1/alerts/channels",
            json={"name": "oncall", "kind": "webhook", "url": f"{receiver.url}/hook"},
        )
        assert channel.status_code == 201, channel.text
        rule = api.post(
            "/api/v1/alerts/rules",
            json={"project": PROJECT, "channel": "oncall", "min_severity": "critical"},
        )
        assert rule.status_code == 201, rule.text

        def upload(archive: Path) -> int:
            with archive.open("rb") as f:
                answer = api.post(
                    "/api/v1/ingest",
                    files={"file": (archive.name, f, "application/gzip")},
                    data={"project": PROJECT},
                )
            assert answer.status_code == 202, answer.text
            return int(answer.json()["job_id"])

        with ThreadPoolExecutor(max_workers=len(archives)) as pool:
            job_ids = list(pool.map(upload, archives))
        uploaded = time.monotonic()

        def finished() -> list[dict] | None:
            page = api.get("/api/v1/jobs", params={"project": PROJECT, "limit": 100}).json()
            done = [j for j in page["items"] if j["state"] in ("succeeded", "failed")]
            return page["items"] if len(done) == len(job_ids) == page["total"] else None

        jobs = {j["id"]: j for j in wait_until(finished, 120, "jobs did not finish")}
        analysed = time.monotonic()
        assert sorted(jobs) == sorted(job_ids)
        failed = {j["run_name"]: j["error"] for j in jobs.values() if j["state"] != "succeeded"}
        assert not failed

        engine = make_engine(fresh_database)
        stack.callback(engine.dispose)
        run_ids = [jobs[job_id]["run_id"] for job_id in job_ids]
        assert len(set(run_ids)) == len(runs)  # one run per upload, none twice
        page = api.get("/api/v1/runs", params={"project": PROJECT, "limit": 100}).json()
        assert sorted(r["name"] for r in page["items"]) == [r.name for r in runs]
        with session_scope(engine) as session:
            assert session.scalar(select(func.count()).select_from(Run)) == len(runs)

        critical_runs = set()
        for run_dir, run_id in zip(runs, run_ids, strict=True):
            truth = json.loads((run_dir / "truth.json").read_text())
            answer = api.get(f"/api/v1/runs/{run_id}/findings").json()
            result = score(truth, answer["findings"])
            assert result.exact, (run_dir.name, result.missed, result.false_alarms)
            assert answer["verdict"] == expected_verdict(truth), run_dir.name
            expected, stored = count_source(run_dir), stored_counts(engine, run_id)
            assert stored["metric_points"] == expected.metric_points, run_dir.name
            assert stored["sample_ids"] == expected.sample_ids, run_dir.name
            if any(f["severity"] == "critical" for f in answer["findings"]):
                critical_runs.add(run_id)
        assert critical_runs

        def delivered() -> list[AlertDelivery] | None:
            with session_scope(engine) as session:
                rows = list(session.scalars(select(AlertDelivery)))
                alerted = {d.alert.run_id for d in rows}
            settled = rows and all(d.state in ("sent", "failed") for d in rows)
            return rows if settled and alerted == critical_runs else None

        deliveries = wait_until(delivered, 30, "alerts were not delivered")
        assert {d.state for d in deliveries} == {"sent"}
        assert len(receiver.requests) == len(deliveries)

        def scraped() -> dict | None:
            (row,) = api.get("/api/v1/nodes").json()
            return row if row["last_success_at"] and len(hits) >= 2 else None

        scraped_node = wait_until(scraped, 30, "beat did not get the node scraped")
        assert scraped_node["failures"] == 0 and scraped_node["series"] == 1

        # compose's API health check (the image's, test_compose_file checks) against this API
        health = services["api"].config["healthcheck"]["test"]
        assert health[:2] == ["CMD", "python"]
        checked = subprocess.run(
            [sys.executable, *health[2:]], env=admin_env, capture_output=True, timeout=30
        )
        assert checked.returncode == 0, checked.stderr

    tasks = {log.name: succeeded_tasks(log) for name in logs for log in logs[name]}
    per_worker = {log.name: tasks[log.name].get("runwatch.ingest", set()) for log in logs["worker"]}
    assert all(per_worker.values()), per_worker  # both ingest workers took jobs
    first, second = per_worker.values()
    assert not first & second and len(first | second) == len(job_ids)
    telemetry = tasks["telemetry-worker-1.log"]
    assert telemetry.get("runwatch.schedule_scrapes") and telemetry.get("runwatch.scrape_node")
    assert len(tasks["alerts-worker-1.log"].get("runwatch.deliver_alert", ())) == len(deliveries)
    for log in logs["worker"]:  # each kind of task stays on its own workers
        assert set(tasks[log.name]) == {"runwatch.ingest"}, tasks[log.name]
    assert "Sending due task schedule-scrapes" in beat_log.read_text()

    spread = ", ".join(f"{name} {len(ids)} jobs" for name, ids in per_worker.items())
    print(
        f"\n{len(job_ids)} runs: {spread};"
        f" processes ready in {ready - started:.1f} s, uploads {uploaded - ready:.1f} s,"
        f" all analysed {analysed - uploaded:.1f} s later; {len(deliveries)} alerts delivered,"
        f" {len(hits)} scrapes; {time.monotonic() - started:.1f} s in all"
    )

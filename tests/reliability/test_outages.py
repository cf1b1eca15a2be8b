"""Broker and database outages in the middle of an ingest, on private servers this test may stop
(never the shared PostgreSQL and Redis other tests use).

Redis restarted without persistence loses every queued message and the ones submitted while it
is away: the recovery sweep sends those jobs again, and all twenty complete. PostgreSQL stopped
for 30 s: the API answers 503 with the error body, fast, for as long as it is away and 200 by
itself after; the workers' jobs retry and complete."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine

from app import migrate
from app.db import make_engine
from tests.procs import background, free_port, runwatch, runwatch_env, wait_for_log, wait_http
from tests.reliability.conftest import (
    FAST_RECOVERY,
    Snapshot,
    check_runs,
    job_states,
    run_paths,
)
from tests.reliability.servers import private_postgres, private_redis, workers

pytestmark = pytest.mark.integration

RECOVERY_LOG = re.compile(r"job recovery: (\{.*\})")
DATABASE_OUTAGE_S = 30.0


def wait_until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.1)
    raise TimeoutError(what)


def recoveries(log_text: str) -> dict[str, int]:
    """What the recovery sweeps in these logs did, summed."""
    total: dict[str, int] = {}
    for found in RECOVERY_LOG.findall(log_text):
        for key, n in json.loads(found.replace("'", '"')).items():
            total[key] = total.get(key, 0) + n
    return total


def submit_in_background(
    env: dict[str, str], paths: list[str], log: Path, project: str
) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "app", "ingest", "--project", project, *paths],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def all_finished(engine: Engine) -> bool:
    return not {"queued", "running"} & set(job_states(engine))


@pytest.mark.parametrize("backend", ["postgresql"])
def test_redis_restart_mid_ingest_loses_no_job(
    engine: Engine,
    database_url: str,
    example_runs: Path,
    twenty_runs: dict[str, str],
    clean_ingest: dict[str, Snapshot],
    tmp_path: Path,
    report: list[str],
) -> None:
    with private_redis() as broker:
        env = runwatch_env(
            home=str(tmp_path / "home"),
            database_url=database_url,
            broker_url=broker.url,
            **FAST_RECOVERY,
        )
        with workers(env, tmp_path / "logs") as pool:
            pool.start(0, "--beat")
            pool.start(1)
            for index, proc in pool.procs.items():
                wait_for_log(tmp_path / "logs" / f"worker-{index}.log", "ready", proc)
            submitter = submit_in_background(
                env, run_paths(example_runs, tmp_path, twenty_runs), tmp_path / "ingest.log", "r"
            )
            wait_until(lambda: job_states(engine).get("running"), 60, "no job started")
            before = job_states(engine)
            broker.stop()  # every queued message is gone
            time.sleep(3.0)  # the submitter goes on: those jobs cannot be queued
            during = job_states(engine)
            broker.start()
            restarted = time.monotonic()
            assert submitter.wait(timeout=120) == 0, (tmp_path / "ingest.log").read_text()
            wait_until(lambda: all_finished(engine), 120, "jobs left unfinished")
            recovered_s = time.monotonic() - restarted
            logs = pool.log_text()

    assert job_states(engine) == {"succeeded": 20}, logs[-6000:]
    rows, _ = check_runs(engine, "r", twenty_runs, clean_ingest)
    swept = recoveries(logs)
    lost = during.get("queued", 0)
    assert lost > 0 and swept.get("resent", 0) >= lost - before.get("queued", 0), (during, swept)
    report.append(
        f"redis restart: stopped with {before} jobs, {sum(during.values())} submitted by the end"
        f" of the 3 s outage ({lost} queued with no message); the sweep re-sent"
        f" {swept.get('resent', 0)} and re-queued {swept.get('requeued', 0)}; all 20 succeeded"
        f" {recovered_s:.1f} s after Redis was back; {rows} rows checked"
    )


def test_database_away_for_30_s_answers_503_then_recovers(
    example_runs: Path,
    twenty_runs: dict[str, str],
    clean_ingest: dict[str, Snapshot],
    tmp_path: Path,
    report: list[str],
) -> None:
    with private_postgres() as database, private_redis() as broker:
        engine = make_engine(database.url)
        migrate.upgrade(engine)
        port = free_port()
        env = runwatch_env(
            home=str(tmp_path / "home"),
            database_url=database.url,
            broker_url=broker.url,
            api_port=str(port),
            **FAST_RECOVERY,
        )
        made = runwatch("tokens", "create", "outage", "--scope", "write", "--json", env=env)
        assert made.returncode == 0, made.stderr
        token = json.loads(made.stdout)["token"]
        auth = {"Authorization": f"Bearer {token}"}
        upload = (example_runs / "clean" / "metrics.jsonl").read_bytes()
        requests: dict[str, Callable[[httpx.Client], httpx.Response]] = {
            "GET /api/v1/runs": lambda c: c.get("/api/v1/runs"),
            "GET /api/v1/health": lambda c: c.get("/api/v1/health"),
            "POST /api/v1/ingest": lambda c: c.post(
                "/api/v1/ingest", files={"file": ("metrics.jsonl", upload)}, data={"project": "u"}
            ),
            "GET /runs (dashboard)": lambda c: c.get(
                "/runs", headers={"Authorization": "", "Cookie": f"runwatch_token={token}"}
            ),
        }
        base = f"http://127.0.0.1:{port}"
        api_log = tmp_path / "api.log"
        with (
            background(["serve", "--no-worker"], env, api_log) as api,
            workers(env, tmp_path / "logs") as pool,
            httpx.Client(base_url=base, headers=auth, timeout=10) as client,
        ):
            wait_http(f"{base}/api/v1/health", api, api_log)
            submitted = runwatch(
                "ingest", "--project", "d", *run_paths(example_runs, tmp_path, twenty_runs), env=env
            )
            assert submitted.returncode == 0, submitted.stderr
            pool.start(0, "--beat")  # the database goes once it has done a few
            wait_until(lambda: job_states(engine).get("succeeded", 0) >= 3, 60, "no job done")
            before = job_states(engine)
            database.stop()
            stopped = time.monotonic()
            answers: list[tuple[str, int, float, dict[str, Any]]] = []
            while time.monotonic() - stopped < DATABASE_OUTAGE_S:
                for what, send in requests.items():
                    sent = time.monotonic()
                    response = send(client)
                    answers.append(
                        (what, response.status_code, time.monotonic() - sent, response.json())
                    )
                time.sleep(0.5)
            database.start()
            back = time.monotonic()
            wait_until(lambda: client.get("/api/v1/runs").status_code == 200, 30, "no recovery")
            api_back_s = time.monotonic() - back
            wait_until(lambda: all_finished(engine), 120, "jobs left unfinished")
            jobs_back_s = time.monotonic() - back
            logs = pool.log_text()
            assert client.get("/api/v1/health").json() == {"status": "ok"}
            assert api.poll() is None, api_log.read_text()

        assert job_states(engine) == {"succeeded": 20}, logs[-6000:]
        rows, _ = check_runs(engine, "d", twenty_runs, clean_ingest)
        engine.dispose()

    wrong = [(what, status, body) for what, status, _, body in answers if status != 503]
    assert not wrong, wrong
    assert {what for what, *_ in answers} == set(requests)
    assert all(body["error"]["code"] == "unavailable" for *_, body in answers)
    slowest = max(elapsed for _, _, elapsed, _ in answers)
    assert slowest < 5.0
    unfinished = before.get("queued", 0) + before.get("running", 0)
    assert unfinished >= 5, before  # the outage hit jobs in flight
    retried = len(re.findall(r"runwatch\.ingest\[[^]]+\] retry: Retry in", logs))
    swept = recoveries(logs)
    report.append(
        f"database outage: {DATABASE_OUTAGE_S:.0f} s with {unfinished} of 20 jobs unfinished;"
        f" {len(answers)} requests during it ({', '.join(requests)}), all 503 'unavailable'"
        " (slowest"
        f" {slowest:.2f} s); API 200 again {api_back_s:.1f} s after PostgreSQL was back;"
        f" {retried} task retries, {swept.get('requeued', 0)} re-queued by the sweep; all 20"
        f" succeeded {jobs_back_s:.1f} s after; {rows} rows checked"
    )

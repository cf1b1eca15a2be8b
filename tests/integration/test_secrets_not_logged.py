"""Secrets never reach the logs: with the API and a worker logging at DEBUG on PostgreSQL and
Redis, a database password, API tokens (good and bad), a webhook's HMAC secret and a
Slack-style secret URL path are used in requests, deliveries and failures, and none of them
appears in any process's output."""

from __future__ import annotations

import json
import tarfile
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import redis

from tests.alerts.receivers import http_receiver
from tests.conftest import REDIS_URL
from tests.procs import background, free_port, runwatch, runwatch_env, wait_http

pytestmark = pytest.mark.integration

DB_PASSWORD = "db-pass-7c1f0e"
HMAC_SECRET = "hmac-secret-93be21"
SLACK_PATH = "/services/T0SECRET/B0SECRET/slack-secret-5d2a"
WRONG_TOKEN = "rwt_wrong-token-secret-0a9f"


def test_no_secret_in_any_log(
    pg_database_url: str, _migrated_pg: object, example_runs: Path, tmp_path: Path
) -> None:
    from tests.conftest import empty_tables

    empty_tables(_migrated_pg)  # type: ignore[arg-type]
    broker = redis.Redis.from_url(REDIS_URL)
    broker.flushdb()
    broker.close()
    # the local server trusts loopback, so any password is accepted: it still travels in the URL
    database_url = pg_database_url.replace("postgres@", f"postgres:{DB_PASSWORD}@", 1)
    env = runwatch_env(
        home=str(tmp_path / "home"),
        database_url=database_url,
        broker_url=REDIS_URL,
        log_level="DEBUG",
        webhook_allow_private="true",
        alert_retry_base_s="0.2",
    )
    made = runwatch("tokens", "create", "ops", "--scope", "admin", "--json", env=env)
    assert made.returncode == 0, made.stderr
    token = json.loads(made.stdout)["token"]
    archive = tmp_path / "megatron_offset.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(example_runs / "megatron_offset", arcname="megatron_offset")

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    logs = [tmp_path / "server.log", tmp_path / "worker.log"]
    with ExitStack() as stack:
        hook = stack.enter_context(http_receiver(statuses=[500]))  # one failure, then accepted
        slack = stack.enter_context(http_receiver())
        server = stack.enter_context(
            background(["serve", "--port", str(port), "--no-worker"], env, logs[0])
        )
        stack.enter_context(background(["worker", "--loglevel", "DEBUG"], env, logs[1]))
        wait_http(f"{base}/api/v1/health", server, logs[0])
        api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"})
        origin = urlsplit(slack.url)
        slack_url = f"{origin.scheme}://{origin.netloc}{SLACK_PATH}"
        for channel in (
            {"name": "hook", "kind": "webhook", "url": hook.url, "secret": HMAC_SECRET},
            {"name": "chat", "kind": "slack", "url": slack_url},
        ):
            assert api.post("/api/v1/alerts/channels", json=channel).status_code == 201
            rule = {"project": "secrets", "channel": channel["name"], "min_severity": "critical"}
            assert api.post("/api/v1/alerts/rules", json=rule).status_code == 201
        listed = api.get("/api/v1/alerts/channels").text
        assert HMAC_SECRET not in listed and "slack-secret" not in listed
        wrong = httpx.get(f"{base}/api/v1/runs", headers={"Authorization": f"Bearer {WRONG_TOKEN}"})
        assert wrong.status_code == 401 and WRONG_TOKEN not in wrong.text
        with archive.open("rb") as f:
            upload = api.post(
                "/api/v1/ingest",
                files={"file": (archive.name, f, "application/gzip")},
                data={"project": "secrets"},
            )
        assert upload.status_code == 202, upload.text
        hook.wait_for(lambda seen: len(seen) >= 2, timeout=90)  # a 500, then the accepted retry
        slack.wait_for(lambda seen: len(seen) >= 1, timeout=90)
    text = "\n".join(log.read_text(errors="replace") for log in logs)
    assert "runwatch.ingest" in text  # the worker did log at DEBUG
    for secret in (DB_PASSWORD, token, HMAC_SECRET, "slack-secret", "T0SECRET", WRONG_TOKEN):
        assert secret not in text, f"{secret!r} appears in the logs"

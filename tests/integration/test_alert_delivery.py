"""Alerts through a real worker process on both stacks: ingesting a run with a bad resume sends
one alert per channel to real receivers on loopback (a webhook that fails twice first, a
Slack-compatible one, an SMTP server, one that always fails), with retries and backoff; the same
run ingested and analysed again sends nothing more."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from app.db import session_scope
from app.models import AlertDelivery, Run
from app.services import alerts as alert_service
from tests.alerts.receivers import Received, http_receiver, smtp_server
from tests.procs import background, runwatch, wait_for_log

pytestmark = pytest.mark.integration

SECRET = "integration-hmac-key"
BASE_URL = "http://runwatch.test:8765"


def deliveries_by_channel(engine: Engine) -> dict[str, list[AlertDelivery]]:
    with session_scope(engine) as session:
        rows = session.scalars(select(AlertDelivery).order_by(AlertDelivery.id)).all()
        out: dict[str, list[AlertDelivery]] = {}
        for row in rows:
            out.setdefault(row.channel.name, []).append(row)
        return out


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        time.sleep(0.1)
    raise TimeoutError(what)


def verified(request: Received) -> bool:
    expected = "sha256=" + hmac.new(SECRET.encode(), request.body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, request.headers["X-Runwatch-Signature"])


def test_alerts_retry_dedupe_and_reach_every_channel(
    service_env: dict[str, str], engine: Engine, example_runs: Path, tmp_path: Path
) -> None:
    with (
        http_receiver([500, 500]) as flaky,
        http_receiver() as chat,
        http_receiver(default=500) as down,
        smtp_server() as inbox,
    ):
        env = {
            **service_env,
            "RUNWATCH_WEBHOOK_ALLOW_PRIVATE": "true",
            "RUNWATCH_ALERT_RETRY_BASE_S": "0.2",
            "RUNWATCH_ALERT_MAX_ATTEMPTS": "3",
            "RUNWATCH_SMTP_HOST": inbox.host,
            "RUNWATCH_SMTP_PORT": str(inbox.port),
            "RUNWATCH_PUBLIC_URL": BASE_URL,
        }
        with session_scope(engine) as session:
            channels = [
                alert_service.create_channel(
                    session=session, name="flaky", kind="webhook", url=f"{flaky.url}/hook",
                    secret=SECRET,
                ),
                alert_service.create_channel(
                    session=session, name="chat", kind="slack",
                    url=f"{chat.url}/services/T0/B0/XYZ",
                ),
                alert_service.create_channel(
                    session=session, name="mail", kind="email", recipients=["oncall@example.com"]
                ),
                alert_service.create_channel(
                    session=session, name="down", kind="webhook", url=f"{down.url}/hook"
                ),
            ]  # fmt: skip
            for channel in channels:
                alert_service.create_rule(session=session, project="alerts", channel=channel)

        log = tmp_path / "worker.log"
        with background(["worker", "--loglevel", "INFO"], env, log) as worker:
            wait_for_log(log, "ready", worker)
            ingested = runwatch(
                "ingest", str(example_runs / "megatron_offset"), "--project", "alerts",
                "--wait", "--json",
                env=env,
            )  # fmt: skip
            assert ingested.returncode == 0, ingested.stderr
            finished = time.monotonic()
            run_id = json.loads(ingested.stdout.splitlines()[-1])["run_id"]

            def settled() -> bool:
                rows = deliveries_by_channel(engine)
                return len(rows) == 4 and all(
                    d.state in ("sent", "failed") for ds in rows.values() for d in ds
                )

            took = wait_until(settled, 60, "deliveries did not settle")
            first = deliveries_by_channel(engine)

            # the same source again (no analysis), a changed source (ingest and analysis
            # again) and `runwatch analyze`: the same finding, so nothing is sent again
            again = runwatch(
                "ingest", str(example_runs / "megatron_offset"), "--project", "alerts", "--wait",
                env=env,
            )  # fmt: skip
            assert again.returncode == 0, again.stderr
            changed = tmp_path / "megatron_offset"
            shutil.copytree(example_runs / "megatron_offset", changed)
            (changed / "notes.txt").write_text("re-uploaded\n")
            reingested = runwatch(
                "ingest", str(changed), "--project", "alerts", "--wait", "--json", env=env
            )
            assert reingested.returncode == 0, reingested.stderr
            assert json.loads(reingested.stdout.splitlines()[-1])["run_id"] == run_id
            assert runwatch("analyze", "alerts/megatron_offset", env=env).returncode == 0
            time.sleep(2)  # time for anything wrongly queued to arrive

        flaky_requests, chat_requests, down_requests = (
            list(flaky.requests),
            list(chat.requests),
            list(down.requests),
        )
        emails = list(inbox.messages)

    with session_scope(engine) as session:
        run = session.get(Run, run_id)
        assert run is not None and run.analyzed_at is not None
    after = deliveries_by_channel(engine)
    assert {k: [d.id for d in v] for k, v in after.items()} == {
        k: [d.id for d in v] for k, v in first.items()
    }, "a re-ingest or re-analysis created deliveries"

    (ok,) = after["flaky"]
    assert (ok.state, ok.attempts, ok.revision) == ("sent", 3, 1)
    assert ok.last_error is not None and "answered HTTP 500" in ok.last_error
    assert [r.status for r in flaky_requests] == [500, 500, 200]
    assert {r.headers["X-Runwatch-Delivery"] for r in flaky_requests} == {str(ok.id)}
    assert all(verified(r) for r in flaky_requests)
    gaps = [b.at - a.at for a, b in itertools.pairwise(flaky_requests)]
    assert gaps[0] >= 0.2 and gaps[1] >= 0.4, gaps
    body = flaky_requests[-1].json()
    assert body["event"] == "alert" and body["alert"]["kind"] == "resume_data_drift"
    assert body["alert"]["resume_from_step"] == 300
    assert "resume from step 300" in body["text"]
    assert f"{BASE_URL}/runs/{run_id}" in body["text"] and body["run"]["id"] == run_id

    (slack,) = after["chat"]
    assert (slack.state, slack.attempts) == ("sent", 1)
    (chat_request,) = chat_requests
    assert "resume_data_drift" in chat_request.json()["text"]
    assert "blocks" in chat_request.json()

    (mail,) = after["mail"]
    assert (mail.state, mail.attempts) == ("sent", 1)
    (email,) = emails
    assert "resume_data_drift" in email["Subject"]
    content = email.get_content()
    assert "resume from step 300" in content and f"{BASE_URL}/runs/{run_id}" in content

    (failed,) = after["down"]
    assert (failed.state, failed.attempts) == ("failed", 3)
    assert failed.last_error is not None and "answered HTTP 500" in failed.last_error
    assert len(down_requests) == 3
    print(
        f"deliveries settled {took:.2f} s after the ingest finished"
        f" ({time.monotonic() - finished:.1f} s incl. the re-ingests); flaky gaps {gaps}"
    )

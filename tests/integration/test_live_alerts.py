"""A run streamed live through the real API and worker alerts within a minute of the data that
shows its bad resume: the webhook gets one resume_data_drift alert naming the step and linking
the run page."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine

from app.db import session_scope
from app.services import alerts as alert_service
from app.services.tokens import create_token
from tests.alerts.receivers import http_receiver
from tests.integration.test_live import stream_records
from tests.procs import background, free_port, wait_for_log, wait_http

pytestmark = pytest.mark.integration

FIRST_DRIFTED_STEP = 337  # the first epoch after the resume from 300 that skips samples


def test_live_run_alerts_within_a_minute_of_the_evidence(
    service_env: dict[str, str], engine: Engine, example_runs: Path, tmp_path: Path
) -> None:
    records = [r for _, r in stream_records(example_runs / "megatron_offset")]
    cut = next(
        i
        for i, r in enumerate(records)
        if r["file"] == "samples" and r["data"]["step"] == 500 and i > len(records) // 3
    )
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with http_receiver() as receiver:
        with session_scope(engine) as session:
            _, token = create_token(session=session, name="live", scope="admin", project=None)
            channel = alert_service.create_channel(
                session=session, name="hook", kind="webhook", url=f"{receiver.url}/h", secret="k"
            )
            alert_service.create_rule(session=session, project="live", channel=channel)
        headers = {"Authorization": f"Bearer {token}"}
        env = {**service_env, "RUNWATCH_WEBHOOK_ALLOW_PRIVATE": "true", "RUNWATCH_PUBLIC_URL": base}
        with (
            background(["worker"], env, tmp_path / "w.log") as worker,
            background(
                ["serve", "--port", str(port), "--no-worker"], env, tmp_path / "s.log"
            ) as api,
        ):
            wait_for_log(tmp_path / "w.log", "ready", worker)
            wait_http(f"{base}/api/v1/health", api, tmp_path / "s.log")
            created = httpx.post(
                f"{base}/api/v1/runs", json={"project": "live", "name": "mo"}, headers=headers
            )
            assert created.status_code == 201, created.text
            run_id = created.json()["id"]
            logger = uuid.uuid4().hex
            evidence_at: float | None = None  # when the first drifted step was posted
            streamed = records[: cut + 1]
            for batch, start in enumerate(range(0, len(streamed), 150), start=1):
                chunk = streamed[start : start + 150]
                answer = httpx.post(
                    f"{base}/api/v1/runs/{run_id}/events",
                    json={"logger": logger, "batch": batch, "records": chunk},
                    headers=headers,
                )
                assert answer.status_code == 202, answer.text
                steps = [r["data"]["step"] for r in chunk if r["file"] == "samples"]
                if evidence_at is None and steps and max(steps) >= FIRST_DRIFTED_STEP:
                    evidence_at = time.time()
            last_posted = time.time()
            assert evidence_at is not None
            alert = receiver.wait_for(lambda seen: len(seen) >= 1, timeout=60)[0]
            time.sleep(3)  # later refreshes re-find the drift: no second alert
            listed = httpx.get(f"{base}/api/v1/alerts?run_id={run_id}", headers=headers).json()

    assert len(receiver.requests) == 1
    body = alert.json()
    assert body["alert"]["kind"] == "resume_data_drift"
    assert body["alert"]["resume_from_step"] == 300
    assert "resume from step 300" in body["text"] and f"{base}/runs/{run_id}" in body["text"]
    assert listed["total"] == 1 and listed["items"][0]["kind"] == "resume_data_drift"
    assert alert.at - last_posted < 60
    print(
        f"alert arrived {alert.at - evidence_at:.1f} s after the first drifted step was posted,"
        f" {alert.at - last_posted:.1f} s after the last batch"
    )

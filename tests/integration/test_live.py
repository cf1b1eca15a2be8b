"""Live logging through the real API and worker: a run streamed batch by batch is re-analysed
while it streams, so a bad resume is flagged a few hundred steps after it, not at the end."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.procs import background, free_port, wait_for_log, wait_http

pytestmark = pytest.mark.integration


def stream_records(run_dir: Path) -> list[tuple[float, dict[str, Any]]]:
    """The run's files as logger records, in the order a training loop wrote them."""
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    samples = [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines()]
    out: list[tuple[float, dict[str, Any]]] = []
    for row, sample in zip(metrics, samples, strict=True):
        out.append((row["time"], {"file": "metrics", "data": row}))
        out.append((row["time"], {"file": "samples", "data": sample}))
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        out.append((event["time"] - 1e-6, {"file": "events", "data": event}))
        if event["event"] == "checkpoint_save_end":
            folder = run_dir / "checkpoints" / f"step_{event['step']:06d}"
            record = {
                "file": "checkpoint",
                "name": folder.name,
                "manifest": json.loads((folder / "manifest.json").read_text()),
                "extra": {"sampler.json": json.loads((folder / "sampler.json").read_text())},
            }
            out.append((event["time"], record))
    out.sort(key=lambda item: item[0])
    return out


def test_streamed_run_is_flagged_soon_after_a_bad_resume(
    service_env: dict[str, str], api_token: str, example_runs: Path, tmp_path: Path
) -> None:
    records = [r for _, r in stream_records(example_runs / "megatron_offset")]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with (
        background(["worker"], service_env, tmp_path / "w.log") as worker,
        background(
            ["serve", "--port", str(port), "--no-worker"], service_env, tmp_path / "s.log"
        ) as api,
    ):
        wait_for_log(tmp_path / "w.log", "ready", worker)
        wait_http(f"{base}/api/v1/health", api, tmp_path / "s.log")
        anonymous = httpx.post(f"{base}/api/v1/runs", json={"project": "live", "name": "mo"})
        assert anonymous.status_code == 401, anonymous.text
        client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {api_token}"})
        created = client.post("/api/v1/runs", json={"project": "live", "name": "mo"})
        assert created.status_code == 201, created.text
        run_id = created.json()["id"]
        again = client.post("/api/v1/runs", json={"project": "live", "name": "mo"})
        assert again.status_code == 200 and again.json()["id"] == run_id

        logger = uuid.uuid4().hex
        cut = next(  # stream up to 200 steps after the resume from 300
            i
            for i, r in enumerate(records)
            if r["file"] == "samples" and r["data"]["step"] == 500 and i > len(records) // 3
        )
        streamed = records[: cut + 1]
        batch = 0
        for start in range(0, len(streamed), 150):
            batch += 1
            body = {"logger": logger, "batch": batch, "records": streamed[start : start + 150]}
            answer = client.post(f"/api/v1/runs/{run_id}/events", json=body)
            assert answer.status_code == 202 and answer.json()["duplicate"] is False
            if batch == 1:  # a retried batch is acknowledged and not applied twice
                retry = client.post(f"/api/v1/runs/{run_id}/events", json=body)
                assert retry.json() == {"accepted": 0, "duplicate": True}

        verdict = _wait_for(client, run_id, lambda v: v["verdict"] == "fail", timeout=60)
        (suspect,) = verdict["suspect_resumes"]
        assert suspect["resume_from_step"] == 300
        assert suspect["findings"][0]["kind"] == "resume_data_drift"
        detail = client.get(f"/api/v1/runs/{run_id}").json()
        assert detail["status"] == "running" and detail["last_step"] == 500

        bad = client.post(
            f"/api/v1/runs/{run_id}/events",
            json={"logger": logger, "batch": batch + 1, "records": [{"file": "../../etc"}]},
        )
        assert bad.status_code == 422 and "unknown file" in bad.text
        missing = client.post(
            "/api/v1/runs/999999/events", json={"logger": "x", "batch": 1, "records": []}
        )
        assert missing.status_code == 404


def _wait_for(client: httpx.Client, run_id: int, done: Any, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    verdict: dict[str, Any] = {}
    while time.monotonic() < deadline:
        verdict = client.get(f"/api/v1/runs/{run_id}/verdict").json()
        if done(verdict):
            return verdict
        time.sleep(0.5)
    raise TimeoutError(f"run {run_id} still {verdict}")

"""The REST API through uvicorn, with a real worker: upload, poll the job, read runs and metrics."""

from __future__ import annotations

import tarfile
import time
from pathlib import Path

import httpx
import pytest

from tests.procs import background, free_port, wait_for_log, wait_http

pytestmark = pytest.mark.integration


def _client(base: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def _upload(api: httpx.Client, archive: Path, **form: str) -> dict:
    with archive.open("rb") as f:
        response = api.post(
            "/api/v1/ingest", files={"file": (archive.name, f, "application/gzip")}, data=form
        )
    assert response.status_code == 202, response.text
    assert response.headers["location"] == response.json()["status_url"]
    return response.json()


def _wait_job(api: httpx.Client, job_id: int, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = api.get(f"/api/v1/jobs/{job_id}").json()
        if job["state"] in ("succeeded", "failed"):
            return job
        time.sleep(0.2)
    raise TimeoutError(f"job {job_id} still {job['state']}")


def test_upload_then_read_runs_segments_and_metrics(
    service_env: dict[str, str], api_token: str, example_runs: Path, tmp_path: Path
) -> None:
    archive = tmp_path / "stall_on_save.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(example_runs / "stall_on_save", arcname="stall_on_save")
    resumed = tmp_path / "exact_resume.zip"
    import shutil

    shutil.make_archive(str(resumed.with_suffix("")), "zip", example_runs / "exact_resume")

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server_log, worker_log = tmp_path / "server.log", tmp_path / "worker.log"
    with (
        background(["worker"], service_env, worker_log) as worker,
        background(
            ["serve", "--port", str(port), "--no-worker"], service_env, server_log
        ) as server,
    ):
        wait_for_log(worker_log, "ready", worker)
        wait_http(f"{base}/api/v1/health", server, server_log)
        with archive.open("rb") as f:  # without a token nothing is accepted, nor listed
            refused = httpx.post(f"{base}/api/v1/ingest", files={"file": (archive.name, f)})
        assert refused.status_code == 401, refused.text
        assert refused.json()["error"]["code"] == "unauthorized"
        assert httpx.get(f"{base}/api/v1/runs").status_code == 401
        api = _client(base, api_token)

        accepted = _upload(api, archive, project="api")
        job = _wait_job(api, accepted["job_id"])
        assert job["state"] == "succeeded", job
        assert job["counts"]["metric_rows"] == 773
        assert job["progress"]["done"] == job["progress"]["total"] > 0
        resumed_job = _wait_job(api, _upload(api, resumed, project="api", run="resumed")["job_id"])
        assert resumed_job["state"] == "succeeded", resumed_job

        page = api.get("/api/v1/runs", params={"project": "api"}).json()
        assert page["total"] == 2
        assert {r["name"] for r in page["items"]} == {"stall_on_save", "resumed"}
        assert api.get("/api/v1/runs", params={"q": "stall"}).json()["total"] == 1

        detail = api.get(f"/api/v1/runs/{resumed_job['run_id']}").json()
        assert [s["start_step"] for s in detail["segments"]] == [0, 400]
        assert detail["num_resumes"] == 1
        assert detail["segments"][1]["restored"] == [
            "model",
            "optimizer",
            "scheduler",
            "rng",
            "dataloader",
        ]
        assert len(detail["checkpoints"]) == 8
        assert {c["name"] for c in detail["checkpoints"][0]["components"]} >= {"model", "optimizer"}
        assert {m["key"] for m in detail["metrics"]} >= {
            "loss",
            "lr",
            "grad_norm",
            "eval/acc_class_0",
        }

        stall_id = job["run_id"]
        full = api.get(f"/api/v1/runs/{stall_id}/metrics/grad_norm?max_points=0").json()
        assert full["num_points"] == 773 and not full["downsampled"]
        peak = max(full["values"])
        small = api.get(f"/api/v1/runs/{stall_id}/metrics/grad_norm?max_points=40").json()
        assert small["downsampled"] and len(small["steps"]) <= 40
        assert max(small["values"]) == peak  # the spike after a save survives downsampling
        evals = api.get(f"/api/v1/runs/{stall_id}/metrics/eval/acc_class_3").json()
        assert evals["num_points"] > 0

        replay = api.get(
            f"/api/v1/runs/{resumed_job['run_id']}/metrics/loss",
            params={"max_points": 0, "superseded": "true"},
        ).json()
        assert replay["superseded"]["steps"] == list(range(401, 438))
        assert replay["steps"] == list(range(1, 841))

        verdict = api.get(f"/api/v1/runs/{stall_id}/verdict").json()
        assert verdict["verdict"] == "warn" and verdict["counts"]["critical"] == 0
        assert [c["verdict"] for c in verdict["checkpoints"]] == ["safe"] * 8
        findings = api.get(
            f"/api/v1/runs/{stall_id}/findings", params={"kind": "checkpoint_loss_spike"}
        ).json()
        assert [f["step"] for f in findings["findings"]] == [200, 400, 600]
        assert all(f["evidence"]["checkpoint"] for f in findings["findings"])
        assert api.get("/api/v1/runs", params={"verdict": "warn"}).json()["total"] == 1
        assert detail["verdict"] == "pass"

        assert api.get("/api/v1/runs/999999").status_code == 404
        assert api.get(f"/api/v1/runs/{stall_id}/metrics/nope").status_code == 404
        assert api.get("/api/v1/jobs/999999").status_code == 404
        assert httpx.get(f"{base}/docs").status_code == 200
        assert "/api/v1/ingest" in httpx.get(f"{base}/openapi.json").json()["paths"]


def test_bad_upload_fails_with_the_file_and_line(
    service_env: dict[str, str], api_token: str, tmp_path: Path
) -> None:
    bad = tmp_path / "metrics.jsonl"
    bad.write_text('{"step": 1, "loss": 1.0}\n{"step": 2, "loss": oops}\n{"step": 3, "loss": 1}\n')
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with (
        background(["worker"], service_env, tmp_path / "w.log") as worker,
        background(
            ["serve", "--port", str(port), "--no-worker"], service_env, tmp_path / "s.log"
        ) as server,
    ):
        wait_for_log(tmp_path / "w.log", "ready", worker)
        wait_http(f"{base}/api/v1/health", server, tmp_path / "s.log")
        api = _client(base, api_token)
        with bad.open("rb") as f:
            response = api.post("/api/v1/ingest", files={"file": ("metrics.jsonl", f)})
        job = _wait_job(api, response.json()["job_id"])
        assert job["state"] == "failed"
        assert job["error"].startswith("metrics.jsonl line 2: not valid JSON")
        assert api.get("/api/v1/runs").json()["total"] == 0

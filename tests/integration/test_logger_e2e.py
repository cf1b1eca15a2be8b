"""A real training script with the logger and the PyTorch helper, killed and resumed, streamed
to a server that is up, then down, then back: Runwatch's analysis of the streamed run equals
that of the run directory on disk, and the resume checks out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.procs import background, free_port, runwatch, wait_for_log, wait_http

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).parents[1] / "tracking" / "train_script.py"


def _train(run_dir: Path, base: str, token: str, *extra: str) -> subprocess.Popen[bytes]:
    """The training script streams with the token from RUNWATCH_TOKEN (it passes none)."""
    return subprocess.Popen(
        [
            sys.executable,
            str(SCRIPT),
            "--run-dir",
            str(run_dir),
            "--server",
            base,
            "--project",
            "e2e",
            "--name",
            "train",
            "--steps",
            "120",
            "--step-delay",
            "0.04",
            "--stream-interval",
            "0.05",
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "RUNWATCH_TOKEN": token},
    )


def test_killed_and_resumed_training_streamed_through_an_outage(
    service_env: dict[str, str], api_token: str, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    serve = ["serve", "--port", str(port), "--no-worker"]
    with background(["worker"], service_env, tmp_path / "w.log") as worker:
        wait_for_log(tmp_path / "w.log", "ready", worker)
        with background(serve, service_env, tmp_path / "s1.log") as api:
            wait_http(f"{base}/api/v1/health", api, tmp_path / "s1.log")
            first = _train(run_dir, base, api_token, "--kill-at", "47")
            assert first.wait(timeout=120) == -9  # it killed itself after step 47
        # the server is down while the resumed process starts and trains; at exit it waits for
        # the server as long as the server takes to start here (seconds on a loaded machine)
        second = _train(
            *(run_dir, base, api_token, "--resume", "latest"),
            *("--close-timeout", "120", "--max-backoff", "1"),
        )
        _wait_until(lambda: _starts(run_dir) == 2, timeout=60)
        time.sleep(1.0)
        with background(serve, service_env, tmp_path / "s2.log") as api:  # and back
            wait_http(f"{base}/api/v1/health", api, tmp_path / "s2.log")
            assert second.wait(timeout=120) == 0, second.stderr.read() if second.stderr else ""
            client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {api_token}"})
            page = client.get("/api/v1/runs", params={"project": "e2e"}).json()
            run_id = page["items"][0]["id"]
            detail = _wait_until(
                lambda: _finished(client, run_id), timeout=90, what="the streamed run to finish"
            )
    assert [s["start_step"] for s in detail["segments"]] == [0, 40]
    assert detail["segments"][1]["restored"] == [
        "model",
        "optimizer",
        "scheduler",
        "rng",
        "dataloader",
    ]
    streamed = _claims(detail["findings"])

    home_env = {**service_env, "RUNWATCH_HOME": str(tmp_path / "disk-home")}
    if "RUNWATCH_DATABASE_URL" in home_env:
        del home_env["RUNWATCH_DATABASE_URL"]
        home_env.pop("RUNWATCH_BROKER_URL", None)
    from_disk = runwatch(
        "ingest", str(run_dir), "--project", "disk", "--wait", "--json", env=home_env
    )
    assert from_disk.returncode == 0, from_disk.stderr
    on_disk = json.loads(from_disk.stdout.splitlines()[-1])
    assert on_disk["verdict"] == "pass"
    assert streamed == _claims(on_disk["findings"]) == {(40, "resume_ok", "info")}


def _starts(run_dir: Path) -> int:
    events = run_dir / "events.jsonl"
    if not events.exists():
        return 0
    return events.read_text().count('"process_start"')


def _finished(client: httpx.Client, run_id: int) -> dict[str, Any] | None:
    detail = client.get(f"/api/v1/runs/{run_id}").json()
    if detail["status"] != "finished" or detail["verdict"] is None:
        return None
    findings = client.get(f"/api/v1/runs/{run_id}/findings").json()["findings"]
    return {**detail, "findings": findings}


def _claims(findings: list[dict[str, Any]]) -> set[tuple[int | None, str, str]]:
    return {(f["resume_from_step"], f["kind"], f["severity"]) for f in findings}


def _wait_until(check: Any, timeout: float, what: str = "a condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise TimeoutError(f"waited {timeout} s for {what}")

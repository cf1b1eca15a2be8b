"""`runwatch ingest` as a user runs it on the embedded default (SQLite, file-system broker, and a
worker thread consuming the real queue when no worker process is running)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.procs import runwatch, runwatch_env

pytestmark = pytest.mark.integration

RESULT_KEYS = {"run_id", "job_id", "status", "error", "verdict", "findings"}


def test_wait_json_prints_one_result_object_as_the_last_line(
    tmp_path: Path, example_runs: Path
) -> None:
    env = runwatch_env(home=str(tmp_path / "home"))
    archive = shutil.make_archive(str(tmp_path / "fresh"), "gztar", example_runs / "fresh_seed")
    result = runwatch(
        "ingest", archive, "--project", "p", "--run", "fresh", "--wait", "--json", env=env
    )
    assert result.returncode == 0, result.stderr
    last = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(last) >= RESULT_KEYS
    assert last["status"] == "succeeded" and last["error"] is None
    assert last["verdict"] == "fail"
    kinds = [(f["kind"], f["resume_from_step"]) for f in last["findings"]]
    assert kinds == [("resume_data_drift", 500)]
    assert "Resume from step 500" in last["findings"][0]["message"]
    assert last["run_name"] == "fresh" and last["counts"]["segments"] == 2
    assert (tmp_path / "home" / "runwatch.db").exists()


def test_failed_job_exits_non_zero_with_the_error(tmp_path: Path) -> None:
    env = runwatch_env(home=str(tmp_path / "home"))
    run = tmp_path / "broken"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 1}\n{"step": 2, "loss": [}\n')
    result = runwatch("ingest", str(run), "--wait", "--json", env=env)
    assert result.returncode == 1
    last = json.loads(result.stdout.strip().splitlines()[-1])
    assert last["status"] == "failed"
    assert last["error"].startswith("metrics.jsonl line 2: not valid JSON")
    assert last["run_id"] is None

    human = runwatch("ingest", str(run), "--wait", env=env)
    assert human.returncode == 1
    assert "metrics.jsonl line 2: not valid JSON" in human.stderr


def test_without_wait_the_job_is_queued_for_a_worker(tmp_path: Path, example_runs: Path) -> None:
    env = runwatch_env(home=str(tmp_path / "home"))
    result = runwatch("ingest", str(example_runs / "clean"), env=env)
    assert result.returncode == 0
    assert "queued job 1" in result.stdout
    assert "no worker is running" in result.stdout
    assert len(list((tmp_path / "home" / "broker" / "queue").iterdir())) == 1


def test_missing_path_is_a_usage_error(tmp_path: Path) -> None:
    env = runwatch_env(home=str(tmp_path / "home"))
    result = runwatch("ingest", str(tmp_path / "nope"), "--wait", env=env)
    assert result.returncode == 2
    assert "no such file or directory" in result.stderr


def test_a_folder_of_wandb_runs_is_one_run_per_run_id(tmp_path: Path) -> None:
    from tests.ingest.wandb_runs import FINISHED_ID, RESUMED_ID, log_files, write_runs

    written = write_runs(tmp_path / "written")
    multi = tmp_path / "multi" / "wandb"
    multi.mkdir(parents=True)
    for root in (written.finished, written.resumed):
        for log in log_files(root):
            shutil.copytree(log.parent, multi / log.parent.name)
    env = runwatch_env(home=str(tmp_path / "home"))
    result = runwatch("ingest", str(tmp_path / "multi"), "--wait", "--json", env=env)
    assert result.returncode == 0, result.stderr
    outcomes = {o["run_name"]: o for o in map(json.loads, result.stdout.splitlines())}
    assert set(outcomes) == {FINISHED_ID, RESUMED_ID}
    assert outcomes[FINISHED_ID]["counts"]["segments"] == 1
    assert outcomes[RESUMED_ID]["counts"]["segments"] == 2
    refused = runwatch("ingest", str(tmp_path / "multi"), "--run", "x", env=env)
    assert refused.returncode == 2 and "holds 2 W&B runs" in refused.stderr

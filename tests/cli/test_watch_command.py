"""`runwatch watch` picks up new runs and re-ingests runs that grow."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.procs import runwatch, runwatch_env

pytestmark = pytest.mark.integration


def test_new_and_growing_runs_are_ingested(tmp_path: Path, example_runs: Path) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    shutil.copytree(example_runs / "clean", folder / "clean")
    (folder / "notes").mkdir()  # not a run: ignored
    env = runwatch_env(home=str(tmp_path / "home"))

    first = runwatch("watch", str(folder), "--project", "w", "--once", env=env)
    assert first.returncode == 0, first.stderr
    assert "run 1 (w/clean): 1 segment(s), 840 metric rows" in first.stdout

    shutil.copytree(example_runs / "megatron_offset", folder / "megatron_offset")
    with (folder / "clean" / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": 841, "loss": 0.01, "lr": 0.0, "time": 1780305779.0}) + "\n")
    second = runwatch("watch", str(folder), "--project", "w", "--once", env=env)
    assert second.returncode == 0, second.stderr
    assert "run 1 (w/clean): 1 segment(s), 841 metric rows" in second.stdout
    assert "(w/megatron_offset)" in second.stdout and "verdict fail" in second.stdout

    assert runwatch("watch", str(tmp_path / "missing"), env=env).returncode == 2

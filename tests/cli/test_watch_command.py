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


def test_nodes_are_registered_from_a_file_and_listed(tmp_path: Path) -> None:
    env = runwatch_env(home=str(tmp_path / "home"))
    nodes = tmp_path / "nodes.toml"
    nodes.write_text(
        '[[node]]\nname = "gpu-1"\nurl = "http://gpu-1:9400/metrics"\ninterval_s = 2\n\n'
        '[[node]]\nname = "prom"\nkind = "prometheus"\nurl = "http://prom:9090"\n'
        "query = '{Hostname=\"gpu-2\"}'\n"
    )
    first = runwatch("nodes", "import", str(nodes), env=env)
    assert first.returncode == 0, first.stderr
    assert "added node gpu-1 (dcgm http://gpu-1:9400/metrics)" in first.stdout
    again = runwatch("nodes", "import", str(nodes), env=env)
    assert "updated node prom" in again.stdout
    listed = json.loads(runwatch("nodes", "list", "--json", env=env).stdout)
    assert [(n["name"], n["kind"], n["interval_s"]) for n in listed] == [
        ("gpu-1", "dcgm", 2.0),
        ("prom", "prometheus", 5.0),
    ]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"name": "x", "url": "ftp://x"}]))
    refused = runwatch("nodes", "import", str(bad), env=env)
    assert refused.returncode == 2 and "url must be http(s)" in refused.stderr
    assert runwatch("nodes", "rm", "gpu-1", env=env).returncode == 0
    assert runwatch("nodes", "rm", "gpu-1", env=env).returncode == 2

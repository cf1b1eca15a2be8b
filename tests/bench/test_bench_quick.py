"""The benchmark suite runs: ``python -m bench --quick`` on small inputs, so it cannot rot.

No timing is asserted here (the targets live in the benchmarks and docs/benchmarks.md); only
that each benchmark runs, fills its rows and writes the JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import render
from bench.api_load import parse_wrk
from bench.common import Row

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CHEAP = ["metrics_ingest", "sample_trace", "dashboard_data", "telemetry", "api_load"]


def test_quick_suite_prints_the_table_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    env = {**os.environ, "RUNWATCH_BENCH_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, "-m", "bench", *CHEAP, "--quick", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc = json.loads(out.read_text())
    assert doc["quick"] is True and doc["failed"] == {}
    assert doc["machine"]["cores"] and doc["machine"]["sqlite"]
    names = [row["benchmark"] for row in doc["rows"]]
    assert any(n.startswith("metric ingest → SQLite") for n in names)
    assert any(n.startswith("metric ingest → PostgreSQL") for n in names)
    assert any(n.startswith("coverage analysis") for n in names)
    assert any(n.startswith("dashboard data") for n in names)
    assert any(n.startswith("telemetry → SQLite") for n in names)
    assert any(n.startswith("API") for n in names)
    ingest = next(r for r in doc["rows"] if r["benchmark"].startswith("metric ingest → SQLite"))
    assert ingest["details"]["points"] == 100_000 and ingest["ratio"] > 0
    assert ingest["details"]["mlflow"]["points"] == 5_000
    assert "| benchmark | Runwatch | baseline | ratio | target | met? |" in proc.stdout


def test_table_marks_met_and_missed_targets() -> None:
    table = render(
        [Row("a", "1", "2", 0.5, "≥ 1", False), Row("b", "3", ratio=250.0, met=True), Row("c", "x")]
    )
    lines = table.splitlines()
    assert lines[2] == "| a | 1 | 2 | 0.5x | ≥ 1 | NO |"
    assert lines[3] == "| b | 3 | - | 250x | - | yes |"
    assert lines[4] == "| c | x | - | - | - | - |"


def test_wrk_output_is_parsed() -> None:
    text = """Running 10s test @ http://127.0.0.1:1/api/v1/runs
  2 threads and 32 connections
  Latency Distribution
     50%  750.00us
     75%    1.20ms
     90%    3.10ms
     99%   12.50ms
  20000 requests in 10.00s, 5.00MB read
Requests/sec:   2000.50
"""
    result = parse_wrk(text)
    assert result["rps"] == 2000.5 and result["requests"] == 20000
    assert result["p50_ms"] == 0.75 and result["p99_ms"] == 12.5 and result["non_2xx"] == 0


def test_parse_in_parts_benchmark_gives_the_same_trace(tmp_path: Path) -> None:
    out = tmp_path / "parts.json"
    env = {**os.environ, "RUNWATCH_BENCH_CACHE": str(tmp_path / "cache")}
    args = ["--steps", "2000", "--batch", "64", "--part-bytes", "50000", "--json", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "bench.ingest_parallel", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc = json.loads(out.read_text())
    assert doc["sample_ids"] == 2000 * 64
    assert [s["workers"] for s in doc["split"]] == [1, 2]
    assert all(s["same_trace"] and s["parts"] > 5 for s in doc["split"])

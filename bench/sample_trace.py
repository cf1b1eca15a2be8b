"""A sample trace of 100M ids (100,000 steps x 1,024): ingest and coverage analysis.

Ingest: a run directory (metrics.jsonl, samples.jsonl with 1,024 ids a line from a shuffled
sampler over 10 epochs, config.json with the dataset size) through the product's path into
SQLite: the source stored, parsed, written as compact chunks and analysed. Analysis: the full
analysis (``app.analysis.report.analyze_run``) of a run of the same size held in memory, with an
exact resume and with a fresh-seed resume that drifts (``bench/analysis_100m.py``). Seconds and
the peak RSS of each child process. Run: python -m bench sample_trace [--quick]
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import Row, Scale, fmt_seconds, in_child
from bench.data import samples_run

TARGET_ANALYSIS_SECONDS = 5.0


def analysis(steps: int, batch: int, drift: bool) -> dict[str, Any]:
    """Child: build the arrays of bench.analysis_100m, then time the analysis alone."""
    from app.analysis.report import analyze_run
    from bench.analysis_100m import build

    resume, crash = int(steps * 0.55), int(steps * 0.557)
    run = build(steps, batch, 10, resume, crash, drift=drift)
    started, cpu = time.perf_counter(), time.process_time()
    report = analyze_run(run)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {
        "sample_ids": int(run.trace.ids.size) if run.trace else 0,
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu, 3),
        "verdict": report.verdict,
        "findings": [f.kind for f in report.findings],
    }


def run(scale: Scale) -> list[Row]:
    steps, batch = scale.trace_steps, scale.trace_batch
    ids = steps * batch
    folder = samples_run(steps, batch)
    tmp = Path(tempfile.mkdtemp(prefix="runwatch-bench-"))
    try:
        job = in_child(
            "bench.metrics_ingest:runwatch_ingest",
            database_url=f"sqlite:///{tmp}/runwatch.db",
            folder=str(folder),
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    s = job["seconds"]
    rows = [
        Row(
            f"sample trace {steps:,} x {batch:,} ({ids / 1e6:g}M ids) → SQLite: whole ingest job",
            f"{fmt_seconds(job['whole_seconds'])} (CPU {fmt_seconds(job['whole_cpu_seconds'])}),"
            f" {job['peak_rss_mb']:,} MB",
            details={
                "runwatch": job,
                "phases": f"store source {s['source']:.1f} s, parse {s['parse']:.1f} s,"
                f" write {s['store']:.1f} s, analysis {s['analysis']:.1f} s",
            },
        )
    ]
    for drift in (False, True):
        result = in_child("bench.sample_trace:analysis", steps=steps, batch=batch, drift=drift)
        kind = "fresh-seed resume, drift" if drift else "exact resume"
        rows.append(
            Row(
                f"coverage analysis, {ids / 1e6:g}M ids in memory ({kind}: {result['verdict']})",
                f"{fmt_seconds(result['seconds'])} (CPU {fmt_seconds(result['cpu_seconds'])}),"
                f" {result['peak_rss_mb']:,} MB (incl. building the arrays)",
                target=f"≤ {TARGET_ANALYSIS_SECONDS:g} s",
                met=result["seconds"] <= TARGET_ANALYSIS_SECONDS,
                details={"runwatch": result},
            )
        )
    return rows

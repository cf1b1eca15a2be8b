"""The analysis of a 100M-id run in parts, with 1 and 2 worker processes, against one process.

The run of ``bench/analysis_100m.py`` (100,000 steps x 1,024 ids over 10 epochs of 10,240,000
samples, one resume). What the Celery tasks do, without the database: the plan (epoch layout,
from the trace's head), the map (each part summarizes its window of whole epochs and encodes
the summaries, as ``runwatch.analysis_part`` does before storing them) in a pool of worker
processes, and the reduce (decode, merge, the rest of the analysis on a paged trace, as
``runwatch.analysis_merge`` does). The merged report is checked equal to ``analyze_run``'s.
Run: python -m bench.analysis_parallel [--drift] [--chunk-ids N]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import time
from typing import Any

import numpy as np

from app.analysis.coverage import last_trace_step
from app.analysis.coverage_parts import (
    MergedCoverage,
    epoch_parts,
    step_window,
    summarize_epochs,
)
from app.analysis.epochs import EpochPlan, plan_epochs
from app.analysis.model import RunData, Trace
from app.analysis.report import AnalysisReport, analyze_run
from app.store.summaries import decode_summaries, encode_summaries
from bench.analysis_100m import build, peak_rss_mb

_RUN: RunData | None = None  # the run, inherited by the forked workers
_PLAN: EpochPlan | None = None


class MemoryIds:
    """The paged trace's reader over the ids in memory (the service reads sample chunks)."""

    def __init__(self, ids: np.ndarray) -> None:
        self.ids = ids
        self.read_ids = 0

    def read(self, start: int, end: int) -> np.ndarray:
        self.read_ids += max(end - start, 0)
        return self.ids[start:end]

    def max_id(self) -> int:
        return int(self.ids.max())


def _part(epochs: range) -> tuple[bytes, float, float]:
    """Map: one part's window of the trace (copied, as a task reads it) to encoded summaries.
    Returns the blob, wall seconds and this process's CPU seconds."""
    assert _RUN is not None and _RUN.trace is not None and _PLAN is not None
    started, cpu = time.perf_counter(), time.process_time()
    trace = _RUN.trace
    first, last = step_window(_PLAN, epochs)
    lo = int(np.searchsorted(trace.steps, first, side="left"))
    hi = int(np.searchsorted(trace.steps, last, side="right"))
    start, end = int(trace.counts[:lo].sum()), int(trace.counts[:hi].sum())
    window = Trace(
        trace.steps[lo:hi],
        trace.counts[lo:hi],
        trace.ids[start:end].copy(),
        trace.segments[lo:hi],
    )
    blob = encode_summaries(summarize_epochs(window, _PLAN, epochs, last_trace_step(trace)))
    return blob, time.perf_counter() - started, time.process_time() - cpu


def _noop(_: int) -> int:
    return 0


def split_analysis(run: RunData, workers: int, chunk_ids: int) -> tuple[AnalysisReport, dict]:
    global _PLAN
    assert run.trace is not None
    timings: dict[str, Any] = {"workers": workers}
    reader = MemoryIds(run.trace.ids)
    paged = Trace.paged(run.trace.steps, run.trace.counts, run.trace.segments, reader)
    paged_run = dataclasses.replace(run, trace=paged)
    started = time.perf_counter()
    plan = plan_epochs(paged_run)
    assert plan is not None
    _PLAN = plan
    parts = epoch_parts(plan, last_trace_step(paged), chunk_ids)
    timings["plan_seconds"] = round(time.perf_counter() - started, 2)
    timings["parts"] = len(parts)
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        pool.map(_noop, range(workers))  # workers are up before the clock starts, as in Celery
        started = time.perf_counter()
        results = pool.map(_part, parts, chunksize=1)
        timings["map_seconds"] = round(time.perf_counter() - started, 2)
    timings["part_seconds"] = [round(s, 2) for _, s, _ in results]
    timings["map_cpu_seconds"] = round(sum(c for _, _, c in results), 2)
    timings["summary_bytes"] = sum(len(blob) for blob, _, _ in results)
    started = time.perf_counter()
    summaries = [s for blob, _, _ in results for s in decode_summaries(blob)]
    reader.read_ids = 0
    report = analyze_run(paged_run, coverage=MergedCoverage(plan, summaries, paged))
    timings["reduce_seconds"] = round(time.perf_counter() - started, 2)
    timings["reduce_ids_read"] = reader.read_ids
    timings["total_seconds"] = round(
        timings["plan_seconds"] + timings["map_seconds"] + timings["reduce_seconds"], 2
    )
    return report, timings


def plain(report: AnalysisReport) -> str:
    return json.dumps(dataclasses.asdict(report), default=str, sort_keys=True)


def main() -> None:
    global _RUN
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1_024)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--drift", action="store_true", help="make the resume a fresh-seed one")
    parser.add_argument("--chunk-ids", type=int, default=20_000_000, help="ids per part")
    parser.add_argument("--json", help="write the result to this file")
    args = parser.parse_args()
    resume, crash = int(args.steps * 0.55), int(args.steps * 0.557)
    _RUN = build(args.steps, args.batch, args.epochs, resume, crash, drift=args.drift)
    assert _RUN.trace is not None
    started, cpu = time.perf_counter(), time.process_time()
    whole = analyze_run(_RUN)
    result: dict[str, Any] = {
        "sample_ids": int(_RUN.trace.ids.size),
        "verdict": whole.verdict,
        "one_process_seconds": round(time.perf_counter() - started, 2),
        "one_process_cpu_seconds": round(time.process_time() - cpu, 2),
        "split": [],
    }
    for workers in (1, 2):
        report, timings = split_analysis(_RUN, workers, args.chunk_ids)
        timings["same_report"] = plain(report) == plain(whole)
        result["split"].append(timings)
    result["peak_rss_mb"] = round(peak_rss_mb())
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()

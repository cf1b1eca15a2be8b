"""The parse of a large ``samples.jsonl`` in parts, with 1 and 2 worker processes, against one
process.

The trace of the ``sample_trace`` benchmark (default 100,000 steps x 1,024 ids). What the
Celery tasks do, without the database and the broker: the cut (``split_lines`` into ranges of
``--part-bytes``), the map (each part parses its range with the reader's line parser and writes
its arrays, as ``runwatch.ingest_part`` does) in a pool of worker processes, and the reduce
(the arrays read back and concatenated, as the ingest task does before the rest of the source).
The result is checked equal to the parse in one process.
Run: python -m bench.ingest_parallel [--steps N] [--batch N] [--part-bytes N]
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from app.ingest.errors import Warnings
from app.ingest.jsonl import iter_json_objects
from app.ingest.line_ranges import LineRange, read_range, split_lines
from app.ingest.records import SampleTrace
from app.ingest.run_directory import read_sample_lines
from app.services.ingest_parts import load_parts, save_part
from bench.common import peak_rss_mb
from bench.data import samples_run

MAX_LINE = 64 << 20


def parse_whole(path: Path) -> SampleTrace:
    with path.open("rb") as stream:
        objects = iter_json_objects(stream, path.name, Warnings(), max_line_bytes=MAX_LINE)
        return read_sample_lines(objects, path.name)


def _part(job: tuple[str, LineRange, str]) -> tuple[float, float]:
    """Map: parse one range and save its arrays. Returns wall and CPU seconds."""
    path, part, out = job
    started, cpu = time.perf_counter(), time.process_time()
    with open(path, "rb") as stream:
        objects = iter_json_objects(
            read_range(stream, part),
            "samples.jsonl",
            Warnings(),
            max_line_bytes=MAX_LINE,
            first_line=part.first_line,
        )
        trace = read_sample_lines(objects, "samples.jsonl")
    save_part(Path(out), trace)
    return time.perf_counter() - started, time.process_time() - cpu


def parse_in_parts(path: Path, workers: int, part_bytes: int) -> tuple[SampleTrace, dict]:
    started = time.perf_counter()
    with path.open("rb") as stream:
        ranges = split_lines(stream, path.stat().st_size, part_bytes)
    cut = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as tmp:
        outs = [str(Path(tmp) / f"part-{i:05d}") for i in range(len(ranges))]
        jobs = [(str(path), r, o) for r, o in zip(ranges, outs, strict=True)]
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            mapped = time.perf_counter()
            timings = pool.map(_part, jobs, chunksize=1)
            mapped = time.perf_counter() - mapped
        reduced = time.perf_counter()
        trace = load_parts([Path(out) for out in outs])
        reduced = time.perf_counter() - reduced
    return trace, {
        "workers": workers,
        "parts": len(ranges),
        "cut_seconds": round(cut, 2),
        "map_seconds": round(mapped, 2),
        "part_cpu_seconds": round(sum(cpu for _, cpu in timings), 2),
        "reduce_seconds": round(reduced, 2),
        "wall_seconds": round(time.perf_counter() - started, 2),
    }


def same(a: SampleTrace, b: SampleTrace) -> bool:
    return all(np.array_equal(getattr(a, n), getattr(b, n)) for n in ("steps", "counts", "ids"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1_024)
    parser.add_argument("--part-bytes", type=int, default=128 << 20)
    parser.add_argument("--json", help="write the result to this file")
    args = parser.parse_args()
    path = samples_run(args.steps, args.batch) / "samples.jsonl"
    started, cpu = time.perf_counter(), time.process_time()
    whole = parse_whole(path)
    result: dict[str, Any] = {
        "file_mb": round(path.stat().st_size / 1e6),
        "sample_ids": int(whole.ids.size),
        "one_process_seconds": round(time.perf_counter() - started, 2),
        "one_process_cpu_seconds": round(time.process_time() - cpu, 2),
        "split": [],
    }
    for workers in (1, 2):
        trace, timings = parse_in_parts(path, workers, args.part_bytes)
        timings["same_trace"] = same(trace, whole)
        result["split"].append(timings)
        del trace
    result["peak_rss_mb"] = round(peak_rss_mb())
    out = io.StringIO()
    json.dump(result, out, indent=2)
    print(out.getvalue())
    if args.json:
        Path(args.json).write_text(out.getvalue())


if __name__ == "__main__":
    main()

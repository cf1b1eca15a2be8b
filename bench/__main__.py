"""The benchmark suite: ``python -m bench [NAME ...] [--quick] [--out PATH]``.

Runs every benchmark (or the named ones), prints one table (benchmark, Runwatch, baseline,
ratio, target, met?) and writes it with every detail as JSON (``artifacts/bench.json``).
Inputs are generated once and cached (``RUNWATCH_BENCH_CACHE``, default ~/.cache/runwatch-bench).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import sys
import time
import traceback
from pathlib import Path

from bench.common import Row, Scale, machine

BENCHMARKS = {
    "metrics_ingest": "metric ingest into SQLite and PostgreSQL vs MLflow log_batch",
    "file_import": "TensorBoard import vs EventAccumulator; W&B offline import (no baseline)",
    "sample_trace": "100M sample ids: ingest through the product, and the coverage analysis",
    "dashboard_data": "a 1M-step metric downsampled to 2,000 points over the API",
    "api_load": "verdict and runs list under wrk load on loopback",
    "telemetry": "scrape-parse-store of 1,000 GPUs x 20 fields, SQLite and PostgreSQL",
}
COLUMNS = ("benchmark", "Runwatch", "baseline", "ratio", "target", "met?")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=", ".join(BENCHMARKS))
    parser.add_argument("--quick", action="store_true", help="small inputs: a smoke test")
    parser.add_argument("--out", default="artifacts/bench.json", help="JSON results file")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = parser.parse_args(argv)
    if args.list:
        for name, what in BENCHMARKS.items():
            print(f"{name:16} {what}")
        return 0
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}; one of {', '.join(BENCHMARKS)}")
    scale = Scale.make(args.quick)
    names = args.names or list(BENCHMARKS)
    started = time.time()
    info = machine()
    rows: list[Row] = []
    failed: dict[str, str] = {}
    for name in names:
        print(f"[bench] {name} ...", file=sys.stderr, flush=True)
        t = time.perf_counter()
        try:
            module = importlib.import_module(f"bench.{name}")
            rows.extend(module.run(scale))
        except Exception:
            failed[name] = traceback.format_exc()
            print(failed[name], file=sys.stderr)
            rows.append(Row(name, "FAILED (see stderr / JSON)"))
        print(f"[bench] {name}: {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    info["load_average_end"] = machine_load()
    print(render(rows))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "seconds": round(time.time() - started),
        "quick": args.quick,
        "scale": dataclasses.asdict(scale),
        "machine": info,
        "rows": [dataclasses.asdict(r) for r in rows],
        "failed": failed,
    }
    out.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(f"\nwritten: {out}", file=sys.stderr)
    return 1 if failed else 0


def machine_load() -> list[float]:
    import os

    return [round(x, 2) for x in os.getloadavg()]


def render(rows: list[Row]) -> str:
    """A Markdown table (readable as text too)."""
    cells = [COLUMNS]
    for r in rows:
        ratio = (
            "-" if r.ratio is None else f"{r.ratio:,.1f}x" if r.ratio < 100 else f"{r.ratio:,.0f}x"
        )
        met = "-" if r.met is None else "yes" if r.met else "NO"
        cells.append((r.benchmark, r.runwatch, r.baseline, ratio, r.target, met))
    lines = ["| " + " | ".join(row) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("---" for _ in COLUMNS) + "|")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

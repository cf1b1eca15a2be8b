"""Telemetry: one scrape-parse-store cycle of 1,000 GPUs x 20 fields (125 nodes of 8 GPUs),
into SQLite and PostgreSQL; ``bench/telemetry_cycle.py`` does the work. Each node's
dcgm-exporter text is parsed and stored in its own transaction, as a worker does per scrape (the
HTTP request excluded). The budget is one cycle every 15 s.
Run: python -m bench telemetry [--quick]
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from bench.common import Row, Scale, in_child, pg_available, pg_database

BUDGET_MS = 15_000
GPUS_PER_NODE = 8


def run(scale: Scale) -> list[Row]:
    rows = []
    kwargs = {
        "nodes": scale.telemetry_nodes,
        "gpus": GPUS_PER_NODE,
        "cycles": scale.telemetry_cycles,
    }
    tmp = Path(tempfile.mkdtemp(prefix="runwatch-bench-"))
    try:
        results = {
            "SQLite": in_child(
                "bench.telemetry_cycle:measure", database_url=f"sqlite:///{tmp}/t.db", **kwargs
            )
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if pg_available():
        with pg_database() as url:
            results["PostgreSQL"] = in_child(
                "bench.telemetry_cycle:measure", database_url=url, **kwargs
            )
    for backend, r in results.items():
        rows.append(
            Row(
                f"telemetry → {backend}: {r['gpus']:,} GPUs x {r['fields']} fields per cycle",
                f"{r['steady_cycle_ms_median']:,} ms/cycle (parse {r['parse_ms_median']} ms;"
                f" first {r['first_cycle_ms']:,} ms)",
                target=f"≤ {BUDGET_MS:,} ms (a 15 s cycle)",
                met=r["steady_cycle_ms_median"] <= BUDGET_MS,
                details={"runwatch": r},
            )
        )
    return rows

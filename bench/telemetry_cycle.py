"""One telemetry cycle for a cluster: 1,000 GPUs x 20 fields, as 125 nodes of 8 GPUs.

Times what a worker does per node scrape (parse the dcgm-exporter text, store one compact row
in its own transaction) for all nodes, several cycles, and reports ms per cycle against the
15 s budget. Run: python -m bench.telemetry_cycle [--database-url URL] [--cycles N]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from typing import Any

from app import migrate
from app.db import make_engine, session_scope
from app.models import Node
from app.services.telemetry_store import store_scrape
from app.telemetry.dcgm import parse_dcgm

FIELDS = [
    ("DCGM_FI_DEV_GPU_UTIL", 0, 100),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", 0, 100),
    ("DCGM_FI_DEV_FB_USED", 0, 80000),
    ("DCGM_FI_DEV_FB_FREE", 0, 80000),
    ("DCGM_FI_DEV_POWER_USAGE", 60, 700),
    ("DCGM_FI_DEV_GPU_TEMP", 30, 85),
    ("DCGM_FI_DEV_MEMORY_TEMP", 30, 90),
    ("DCGM_FI_DEV_SM_CLOCK", 300, 1980),
    ("DCGM_FI_DEV_MEM_CLOCK", 1000, 2619),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 1e6, 9e8),
    ("DCGM_FI_DEV_XID_ERRORS", 0, 0),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 0, 3),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0, 1),
    ("DCGM_FI_PROF_SM_ACTIVE", 0, 1),
    ("DCGM_FI_PROF_SM_OCCUPANCY", 0, 1),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 0, 1),
    ("DCGM_FI_PROF_DRAM_ACTIVE", 0, 1),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", 0, 3e10),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", 0, 3e10),
    ("DCGM_FI_DEV_ENC_UTIL", 0, 100),
]


def exposition(node: int, gpus: int, rng: random.Random) -> str:
    lines = []
    for name, low, high in FIELDS:
        lines.append(f"# TYPE {name} gauge")
        for gpu in range(gpus):
            labels = (
                f'gpu="{gpu}",UUID="GPU-{node:04d}-{gpu:02d}",device="nvidia{gpu}",'
                f'modelName="NVIDIA H100 80GB HBM3",Hostname="node-{node:04d}",hpc_job="4242"'
            )
            lines.append(f"{name}{{{labels}}} {rng.uniform(low, high):.3f}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--nodes", type=int, default=125)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--json", help="write the result here")
    args = parser.parse_args()
    result = measure(args.database_url, args.nodes, args.gpus, args.cycles)
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


def measure(database_url: str | None, nodes: int, gpus: int, cycles: int) -> dict[str, Any]:
    """Run ``cycles`` cycles of ``nodes`` x ``gpus`` GPUs; times per cycle and of parsing."""
    url = database_url or f"sqlite:///{tempfile.mkdtemp()}/bench.db"
    engine = make_engine(url)
    migrate.upgrade(engine)
    rng = random.Random(0)
    with session_scope(engine) as session:
        rows = [
            Node(name=f"bench-{i:04d}-{time.time_ns()}", kind="dcgm", url="http://x/metrics")
            for i in range(nodes)
        ]
        session.add_all(rows)
    node_ids = [n.id for n in rows]
    texts = [exposition(i, gpus, rng) for i in range(nodes)]
    cycle_s, parse_s = [], []
    for cycle in range(cycles):
        started = time.perf_counter()
        parsing = 0.0
        for node_id, text in zip(node_ids, texts, strict=True):
            with session_scope(engine) as session:
                node = session.get(Node, node_id)
                assert node is not None
                t = time.perf_counter()
                scrape = parse_dcgm(text)
                parsing += time.perf_counter() - t
                store_scrape(session, node, scrape, at=time.time() + cycle)
        cycle_s.append(time.perf_counter() - started)
        parse_s.append(parsing)
    engine.dispose()
    return {
        "database": engine.dialect.name,
        "gpus": nodes * gpus,
        "fields": len(FIELDS),
        "values_per_cycle": nodes * gpus * len(FIELDS),
        "first_cycle_ms": round(cycle_s[0] * 1000),  # creates the series
        "steady_cycle_ms_median": round(statistics.median(cycle_s[1:]) * 1000),
        "parse_ms_median": round(statistics.median(parse_s[1:]) * 1000),
        "budget_ms": 15000,
    }


if __name__ == "__main__":
    main()

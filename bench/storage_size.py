"""How much PostgreSQL a run takes: ingest generated runs into a fresh database through the
product's own ingest service and read ``pg_total_relation_size`` (table + TOAST + indexes) of
every table before and after each.

Two generated run directories: a metrics log of N steps x 10 metrics (1M points by default) and
a sample trace of S steps x B ids from a shuffled sampler over ten epochs (10M ids by default).
Prints bytes per table, per 1M metric points and per 100M sample ids, and the raw source sizes
that the source store keeps beside the database.
Run: python -m bench.storage_size [--admin-url URL] [--metric-steps N] [--sample-steps S]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import orjson
from sqlalchemy import Engine, create_engine, text

from app import migrate
from app.config import Settings
from app.db import make_engine, session_scope
from app.services import ingest as ingest_service
from app.services.sources import store_path

ADMIN_URL = os.environ.get(
    "RUNWATCH_TEST_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
TABLES_SQL = text(
    "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c"
    " JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname = 'public' AND c.relkind = 'r'"
)


def write_metrics(folder: Path, steps: int) -> Path:
    """STEPS lines of step, time and ten metrics (realistic noise, so no free compression)."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    step = np.arange(1, steps + 1)
    loss = np.exp(rng.normal(np.log(np.linspace(4.0, 1.5, steps)), 0.03))
    columns = {
        "time": 1.7e9 + step * 0.25 + rng.uniform(0, 0.01, steps),
        "loss": loss,
        "lr": 3e-4 * np.cos(np.linspace(0, np.pi / 2, steps)),
        "grad_norm": np.exp(rng.normal(0.0, 0.3, steps)),
        "loss_scale": np.full(steps, 65536.0),
        "tokens": step * 524_288.0,
        "throughput": rng.normal(410.0, 6.0, steps),
        "accuracy": 1 - loss / 5,
        "ppl": np.exp(loss),
        "mfu": rng.uniform(0.38, 0.42, steps),
        "memory_gb": rng.uniform(61.0, 63.0, steps),
    }
    names = list(columns)
    values = np.column_stack([columns[n] for n in names]).tolist()
    with (folder / "metrics.jsonl").open("wb") as out:
        for i, row in enumerate(values):
            out.write(orjson.dumps({"step": i + 1, **dict(zip(names, row, strict=True))}) + b"\n")
    return folder


def write_samples(folder: Path, steps: int, batch: int, epochs: int = 10) -> Path:
    """STEPS lines of BATCH ids from a shuffled sampler over ``steps * batch / epochs`` samples,
    and a loss per step."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(7)
    per_epoch = steps // epochs
    with (
        (folder / "samples.jsonl").open("wb") as samples,
        (folder / "metrics.jsonl").open("wb") as metrics,
    ):
        for epoch in range(epochs):
            order = rng.permutation(per_epoch * batch).reshape(per_epoch, batch)
            for row in range(per_epoch):
                step = epoch * per_epoch + row + 1
                ids = order[row].tolist()
                samples.write(orjson.dumps({"step": step, "sample_ids": ids}) + b"\n")
                metrics.write(orjson.dumps({"step": step, "loss": 2.0 + 1 / step}) + b"\n")
    return folder


@contextmanager
def scratch_database(admin_url: str) -> Iterator[str]:
    name = f"runwatch_size_{uuid.uuid4().hex[:10]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield admin_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def table_sizes(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {name: int(size) for name, size in conn.execute(TABLES_SQL)}


def ingest(engine: Engine, settings: Settings, path: Path) -> tuple[dict[str, int], float]:
    """Ingest PATH as its own run; the growth of every table and the seconds it took."""
    before = table_sizes(engine)
    started = time.perf_counter()
    source = store_path(path, settings)
    with session_scope(engine) as session:
        job = ingest_service.submit(
            session=session, source=source, project="size", run_name=path.name
        )
        job_id = job.id
    job = ingest_service.run_job(engine=engine, settings=settings, job_id=job_id)
    assert job.state == "succeeded", job.error
    took = time.perf_counter() - started
    after = table_sizes(engine)
    return {t: after[t] - before.get(t, 0) for t in after if after[t] != before.get(t, 0)}, took


def source_bytes(folder: Path, *names: str) -> int:
    return sum((folder / name).stat().st_size for name in names)


def show(title: str, growth: dict[str, int], per: float, unit: str) -> None:
    total = sum(growth.values())
    print(f"\n{title}: {total / 2**20:.1f} MiB in PostgreSQL, {total / per:,.0f} bytes {unit}")
    for table, grown in sorted(growth.items(), key=lambda kv: -kv[1]):
        print(f"  {table:<20} {grown / 2**20:8.2f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--admin-url", default=ADMIN_URL)
    parser.add_argument("--metric-steps", type=int, default=100_000, help="x 10 metrics")
    parser.add_argument("--sample-steps", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=1_000, help="sample ids per step")
    args = parser.parse_args()

    points = args.metric_steps * 10
    ids = args.sample_steps * args.batch
    with scratch_database(args.admin_url) as url, tempfile.TemporaryDirectory() as tmp:
        metrics = write_metrics(Path(tmp) / "metrics-run", args.metric_steps)
        samples = write_samples(Path(tmp) / "samples-run", args.sample_steps, args.batch)
        engine = make_engine(url)
        migrate.upgrade(engine)
        settings = Settings(home=Path(tmp) / "home", database_url=url)
        grown, took = ingest(engine, settings, metrics)
        show(f"{points:,} metric points ({took:.1f} s)", grown, points / 1e6, "per 1M points")
        raw = source_bytes(metrics, "metrics.jsonl")
        print(f"  raw source (kept in the source store): {raw:,}")
        grown, took = ingest(engine, settings, samples)
        show(f"{ids:,} sample ids ({took:.1f} s)", grown, ids / 1e8, "per 100M ids")
        raw = source_bytes(samples, "samples.jsonl", "metrics.jsonl")
        print(f"  raw source (kept in the source store): {raw:,}")
        engine.dispose()


if __name__ == "__main__":
    main()

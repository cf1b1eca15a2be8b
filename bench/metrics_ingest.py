"""Metric ingest: N steps x 10 metrics from JSONL into SQLite and PostgreSQL, beside MLflow.

Runwatch goes through the product's own path (the source stored, an ingest job run: parse, one
write transaction, analysis), timed as a whole and without its analysis. MLflow gets the same
points, already parsed into ``Metric`` objects (its parse is not timed), logged with
``MlflowClient.log_batch`` in batches of its maximum (1,000 metrics) into a tracking store on the
same database. MLflow takes over an hour for 10M points here, so it logs a prefix and its rate is
extrapolated linearly (it only slows down as its tables grow, so this favours MLflow).
Each side runs in its own child process, which gives its peak RSS.
Run: python -m bench metrics_ingest [--quick]
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (
    Row,
    Scale,
    Timer,
    fmt_rate,
    fmt_seconds,
    in_child,
    pg_available,
    pg_database,
)
from bench.data import METRIC_NAMES, metrics_jsonl

MLFLOW_BATCH = 1000  # MLflow's limit of metrics per log_batch call
TARGET_POINTS_PER_S = 1_000_000
TARGET_MLFLOW_RATIO = 50


def runwatch_ingest(database_url: str, folder: str) -> dict[str, Any]:
    """Child: store the source and run one ingest job, timing its phases."""
    from app import migrate
    from app.config import Settings
    from app.db import make_engine, session_scope
    from app.services import analysis as analysis_service
    from app.services import ingest as ingest_service
    from app.services.sources import store_path

    home = Path(tempfile.mkdtemp(prefix="runwatch-bench-"))
    try:
        settings = Settings(home=home, database_url=database_url)
        engine = make_engine(settings.sqlalchemy_url)
        migrate.upgrade(engine)
        timer = Timer()
        analysis_service.analyze = timer.wrap("analysis", analysis_service.analyze)
        ingest_service._read = timer.wrap("parse", ingest_service._read)
        ingest_service._store = timer.wrap("store", ingest_service._store)
        cpu = time.process_time()
        with timer("source"):
            source = store_path(Path(folder), settings)
            with session_scope(engine) as session:
                job_id = ingest_service.submit(
                    session=session, source=source, project="bench", run_name="metrics"
                ).id
        with timer("job"):
            job = ingest_service.run_job(engine=engine, settings=settings, job_id=job_id)
        cpu = time.process_time() - cpu
        if job.state != "succeeded":
            raise RuntimeError(f"ingest failed: {job.error}")
        engine.dispose()
        s = timer.seconds
        return {
            "points": int(job.counts["metric_points"]),
            "rows": int(job.counts["metric_rows"]),
            "seconds": {k: round(v, 3) for k, v in s.items()},
            "whole_seconds": round(s["source"] + s["job"], 3),
            "whole_cpu_seconds": round(cpu, 3),  # this process's CPU (not a database server's)
            "parse_store_seconds": round(s["job"] - s["analysis"], 3),
        }
    finally:
        shutil.rmtree(home, ignore_errors=True)


def mlflow_log_batch(tracking_uri: str, folder: str, points: int) -> dict[str, Any]:
    """Child: log the first ``points`` points of the file with MlflowClient.log_batch."""
    import orjson
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    metrics: list[Metric] = []
    with open(Path(folder) / "metrics.jsonl", "rb") as f:
        for line in f:
            row = orjson.loads(line)
            stamp = int(row["time"] * 1000)
            metrics.extend(
                Metric(key=name, value=float(row[name]), timestamp=stamp, step=row["step"])
                for name in METRIC_NAMES
            )
            if len(metrics) >= points:
                break
    client = MlflowClient(tracking_uri=tracking_uri)
    experiment = client.create_experiment("bench")  # creates the tables: not timed
    run_id = client.create_run(experiment).info.run_id
    started, cpu = time.perf_counter(), time.process_time()
    for lo in range(0, len(metrics), MLFLOW_BATCH):
        client.log_batch(run_id, metrics=metrics[lo : lo + MLFLOW_BATCH])
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    client.set_terminated(run_id)
    stored = len(client.get_metric_history(run_id, METRIC_NAMES[0]))
    return {
        "points": len(metrics),
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu, 3),
        "stored_first_key": stored,
    }


def run(scale: Scale) -> list[Row]:
    folder = metrics_jsonl(scale.metric_steps)
    total = scale.metric_steps * len(METRIC_NAMES)
    prefix = min(scale.mlflow_points, total)
    backends: list[str] = ["SQLite"]
    if pg_available():
        backends.append("PostgreSQL")
    rows: list[Row] = []
    label = f"{scale.metric_steps:,} steps x {len(METRIC_NAMES)} metrics"
    if importlib.util.find_spec("mlflow") is None:
        raise RuntimeError("MLflow is not installed: pip install -e '.[bench]'")
    for backend in backends:
        rw, ml = _measure(backend, str(folder), prefix)
        rw_rate = rw["points"] / rw["whole_seconds"]
        ps_rate = rw["points"] / rw["parse_store_seconds"]
        ml_rate = ml["points"] / ml["seconds"]
        ratio = rw_rate / ml_rate
        extrapolated = ml["points"] < total
        baseline = f"MLflow log_batch: {fmt_rate(ml_rate)}, {ml['peak_rss_mb']} MB" + (
            f" (first {ml['points']:,} pts; 10M ≈ {fmt_seconds(total / ml_rate)})"
            if extrapolated
            else ""
        )
        if backend == "SQLite":
            target = f"≥ 1M pts/s, ≥ {TARGET_MLFLOW_RATIO}x MLflow"
            met = rw_rate >= TARGET_POINTS_PER_S and ratio >= TARGET_MLFLOW_RATIO
        else:
            target = f"≥ {TARGET_MLFLOW_RATIO}x MLflow"
            met = ratio >= TARGET_MLFLOW_RATIO
        details = {
            "points": rw["points"],
            "runwatch": rw,
            "mlflow": {**ml, "extrapolated": extrapolated, "points_per_s": round(ml_rate)},
            "runwatch_points_per_s": round(rw_rate),
            "runwatch_parse_store_points_per_s": round(ps_rate),
            "points_per_cpu_second": {
                "runwatch": round(rw["points"] / rw["whole_cpu_seconds"]),
                "mlflow": round(ml["points"] / ml["cpu_seconds"]),
            },
        }
        rows.append(
            Row(
                f"metric ingest → {backend}, {label}: whole job",
                f"{fmt_rate(rw_rate)} ({fmt_seconds(rw['whole_seconds'])};"
                f" CPU {fmt_seconds(rw['whole_cpu_seconds'])}), {rw['peak_rss_mb']} MB",
                baseline,
                ratio,
                target,
                met,
                details,
            )
        )
        rows.append(
            Row(
                f"metric ingest → {backend}: parse + store, no analysis",
                f"{fmt_rate(ps_rate)} ({fmt_seconds(rw['parse_store_seconds'])})",
                f"MLflow log_batch: {fmt_rate(ml_rate)}",
                ps_rate / ml_rate,
            )
        )
    return rows


def _measure(backend: str, folder: str, prefix: int) -> tuple[dict[str, Any], dict[str, Any]]:
    if backend == "SQLite":
        tmp = Path(tempfile.mkdtemp(prefix="runwatch-bench-"))
        try:
            rw = in_child(
                "bench.metrics_ingest:runwatch_ingest",
                database_url=f"sqlite:///{tmp}/runwatch.db",
                folder=folder,
            )
            ml = in_child(
                "bench.metrics_ingest:mlflow_log_batch",
                tracking_uri=f"sqlite:///{tmp}/mlflow.db",
                folder=folder,
                points=prefix,
            )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return rw, ml
    with pg_database() as url:
        rw = in_child("bench.metrics_ingest:runwatch_ingest", database_url=url, folder=folder)
    with pg_database("mlflow_bench") as url:
        ml = in_child(
            "bench.metrics_ingest:mlflow_log_batch", tracking_uri=url, folder=folder, points=prefix
        )
    return rw, ml

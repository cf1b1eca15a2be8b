"""The analysis of a stored 100M-id run through the product's services: in one task, and in
parts with 1 and 2 worker processes.

The run of ``bench/analysis_100m.py`` is written through ``run_store.replace_run_data`` (sample
chunks, metric chunks, segments, checkpoints) into a database, then analysed three ways:
``analysis.analyze`` in one process (what a small run's ingest task does), and the batch of
``analysis_parts`` (plan, parts, merge) with its parts run by one process, then by two. Each
worker process calls ``analysis_parts.run_part`` as the Celery task does: it reads its window's
chunks and stores its summaries in the database. Reports the seconds of each phase and checks
the stored verdict and findings agree.
Run: python -m bench.analysis_parts_db [--database-url URL] [--drift] [--steps N]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Engine, select

from app import migrate
from app.analysis.model import RunData
from app.config import Settings
from app.db import make_engine, session_scope
from app.ingest.errors import Warnings
from app.ingest.records import (
    CheckpointRecord,
    ComponentRecord,
    EventRecord,
    MetricTable,
    ParsedRun,
    SampleTrace,
)
from app.models import Finding, IngestJob, Project, Run
from app.services import analysis as analysis_service
from app.services import analysis_parts, job_claims
from app.services.run_store import plan_layout, replace_run_data
from bench.analysis_100m import build

T0 = 1.7e9
_URL = ""
_SETTINGS: Settings | None = None


def parsed_run(run: RunData, resume: int, crash: int) -> ParsedRun:
    """The run as a reader would hand it over: rows in file order, the replay included."""
    assert run.trace is not None and run.replayed_trace is not None
    trace, replay = run.trace, run.replayed_trace
    steps = trace.steps
    head, tail = steps <= resume, steps > resume
    offsets = trace.offsets
    file_steps = np.concatenate([steps[head], replay.steps, steps[tail]])
    counts = np.concatenate([trace.counts[head], replay.counts, trace.counts[tail]])
    ids = np.concatenate([trace.ids[: offsets[resume]], replay.ids, trace.ids[offsets[resume] :]])
    start1 = T0 + crash * 0.25 + 60
    times = np.concatenate(
        [T0 + file_steps[:crash] * 0.25, start1 + (file_steps[crash:] - resume) * 0.25]
    )
    lr = run.metrics["lr"]
    values = np.concatenate([lr.values[:crash], lr.values[resume:]])
    rows = np.arange(file_steps.size)
    components = {c: ComponentRecord(f"{c}.pt", 1) for c in sorted(run.checkpoints[0].components)}
    name = run.segments[1].checkpoint
    return ParsedRun(
        source_format="run_directory",
        metrics=MetricTable(file_steps, times, {"lr": (rows, values)}, {"lr": "lr"}),
        samples=SampleTrace(file_steps, counts, ids),
        events=[
            EventRecord("process_start", 0, T0, {"resumed_from": None}),
            EventRecord("process_exit", crash, T0 + crash * 0.25 + 1, {"reason": "crash"}),
            EventRecord(
                "process_start",
                resume,
                start1,
                {"resumed_from": f"checkpoints/{name}", "restored": sorted(components)},
            ),
        ],
        checkpoints=[
            CheckpointRecord(
                name=c.name,
                step=c.step,
                consumed_samples=c.consumed_samples,
                epoch=c.epoch,
                consumed_in_epoch=c.consumed_in_epoch,
                seed=c.seed,
                dataset_size=c.dataset_size,
                global_batch_size=c.global_batch_size,
                components=components,
            )
            for c in run.checkpoints
            if c.step <= crash
        ],
        dataset_size=run.dataset_size,
        global_batch_size=run.global_batch_size,
    )


def store(engine: Engine, parsed: ParsedRun) -> int:
    layout = plan_layout(parsed, Warnings())
    with session_scope(engine) as session:
        project = Project(name="bench")
        session.add(project)
        session.flush()
        run = Run(
            project_id=project.id, name="parts", source_format="run_directory", status="unknown"
        )
        session.add(run)
        session.flush()
        replace_run_data(session, run, parsed, layout)
        return run.id


def claimed_job(engine: Engine, run_id: int) -> tuple[int, str]:
    """A running ingest job of the run, as the ingest task holds it after storing the rows."""
    token = job_claims.new_token()
    with session_scope(engine) as session:
        job = IngestJob(
            state="queued",
            project="bench",
            run_name="parts",
            run_id=run_id,
            source_name="bench",
            source_kind="directory",
            source_key="bench",
            source_sha256="0" * 64,
            source_bytes=0,
            counts={},
            warnings=[],
            created_at=datetime.now(UTC),
        )
        session.add(job)
        session.flush()
        job_claims.claim(session=session, job_id=job.id, token=token)
        return job.id, token


def _init_worker(url: str, settings: Settings) -> None:
    global _URL, _SETTINGS
    _URL, _SETTINGS = url, settings


def _run_part(part_id: int) -> tuple[int | None, float, float]:
    """A worker process: ``runwatch.analysis_part`` without Celery. Returns the batch id from
    the last part, wall seconds and this process's CPU seconds."""
    assert _SETTINGS is not None
    engine = _worker_engine()
    started, cpu = time.perf_counter(), time.process_time()
    batch = analysis_parts.run_part(engine=engine, settings=_SETTINGS, part_id=part_id)
    return batch, time.perf_counter() - started, time.process_time() - cpu


_ENGINE: Engine | None = None


def _worker_engine() -> Engine:
    global _ENGINE
    if _ENGINE is None:
        _ENGINE = make_engine(_URL)
    return _ENGINE


def stored_findings(engine: Engine, run_id: int) -> list[tuple[Any, ...]]:
    with session_scope(engine) as session:
        rows = session.scalars(select(Finding).where(Finding.run_id == run_id).order_by(Finding.id))
        return [(f.kind, f.severity, f.step, f.message) for f in rows]


def in_parts(
    engine: Engine, url: str, settings: Settings, run_id: int, workers: int
) -> dict[str, Any]:
    job_id, token = claimed_job(engine, run_id)
    parts: list[int] = []
    started = time.perf_counter()
    assert analysis_parts.start(
        engine=engine,
        settings=settings,
        job_id=job_id,
        token=token,
        run_id=run_id,
        enqueue=parts.extend,
    )
    out: dict[str, Any] = {"workers": workers, "parts": len(parts)}
    out["plan_seconds"] = round(time.perf_counter() - started, 2)
    context = multiprocessing.get_context("spawn")
    with context.Pool(workers, initializer=_init_worker, initargs=(url, settings)) as pool:
        pool.map(_worker_engine_ready, range(workers))  # started and connected, as Celery is
        started = time.perf_counter()
        results = pool.map(_run_part, parts, chunksize=1)
        out["map_seconds"] = round(time.perf_counter() - started, 2)
    out["part_seconds"] = [round(s, 2) for _, s, _ in results]
    out["map_cpu_seconds"] = round(sum(c for _, _, c in results), 2)
    (batch_id,) = [b for b, _, _ in results if b is not None]
    started = time.perf_counter()
    job = analysis_parts.merge(engine=engine, settings=settings, batch_id=batch_id)
    out["merge_seconds"] = round(time.perf_counter() - started, 2)
    assert job is not None and job.state == "succeeded", job
    out["total_seconds"] = round(out["plan_seconds"] + out["map_seconds"] + out["merge_seconds"], 2)
    return out


def _worker_engine_ready(_: int) -> int:
    with _worker_engine().connect():
        return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--database-url", help="a migrated or empty database (a temporary SQLite)")
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1_024)
    parser.add_argument("--drift", action="store_true", help="make the resume a fresh-seed one")
    parser.add_argument("--chunk-ids", type=int, default=20_000_000, help="ids per part")
    parser.add_argument("--json", help="write the result to this file")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="runwatch-bench-parts-"))
    try:
        result = measure(args, home)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


def measure(args: argparse.Namespace, home: Path) -> dict[str, Any]:
    url = args.database_url or f"sqlite:///{home / 'runwatch.db'}"
    settings = Settings(home=home, database_url=url, analysis_chunk_ids=args.chunk_ids)
    engine = make_engine(url)
    migrate.upgrade(engine)
    resume, crash = int(args.steps * 0.55), int(args.steps * 0.557)
    run = build(args.steps, args.batch, 10, resume, crash, drift=args.drift)
    started = time.perf_counter()
    run_id = store(engine, parsed_run(run, resume, crash))
    result: dict[str, Any] = {
        "database": engine.dialect.name,
        "sample_ids": int(run.trace.ids.size) if run.trace else 0,
        "store_seconds": round(time.perf_counter() - started, 2),
    }
    del run
    started, cpu = time.perf_counter(), time.process_time()
    with session_scope(engine) as session:
        report = analysis_service.analyze(session=session, run_id=run_id)
    result["one_task_seconds"] = round(time.perf_counter() - started, 2)
    result["one_task_cpu_seconds"] = round(time.process_time() - cpu, 2)
    result["verdict"] = report.verdict
    whole = stored_findings(engine, run_id)
    result["split"] = []
    for workers in (1, 2):
        timings = in_parts(engine, url, settings, run_id, workers)
        timings["same_findings"] = stored_findings(engine, run_id) == whole
        result["split"].append(timings)
    engine.dispose()
    return result


if __name__ == "__main__":
    main()

"""Test helpers: ingest through the service, and count what a source holds independently."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Engine, func, select

from app.config import Settings
from app.db import session_scope
from app.models import (
    Checkpoint,
    Event,
    IngestJob,
    MetricSeries,
    Project,
    Run,
    SampleChunk,
    Segment,
)
from app.services import ingest as ingest_service
from app.services.sources import store_path


def ingest_path(
    engine: Engine, settings: Settings, path: Path, *, project: str = "test", run: str | None = None
) -> IngestJob:
    source = store_path(path, settings)
    with session_scope(engine) as session:
        job = ingest_service.submit(
            session=session, source=source, project=project, run_name=run or source.default_run_name
        )
        job_id = job.id
    return ingest_service.run_job(engine=engine, settings=settings, job_id=job_id)


@dataclass
class SourceCounts:
    """What a run directory holds, counted with plain ``json`` (independent of the reader)."""

    metric_rows: int = 0
    metric_points: int = 0
    sample_steps: int = 0
    sample_ids: int = 0
    events: int = 0
    checkpoints: int = 0
    starts: list[dict] = field(default_factory=list)


def count_source(run_dir: Path) -> SourceCounts:
    counts = SourceCounts()
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        counts.metric_rows += 1
        counts.metric_points += sum(1 for k in row if k not in ("step", "time"))
    samples = run_dir / "samples.jsonl"
    if samples.exists():
        for line in samples.read_text().splitlines():
            row = json.loads(line)
            counts.sample_steps += 1
            counts.sample_ids += len(row["sample_ids"])
    events = run_dir / "events.jsonl"
    if events.exists():
        for line in events.read_text().splitlines():
            event = json.loads(line)
            counts.events += 1
            if event["event"] == "process_start":
                counts.starts.append(event)
    counts.checkpoints = len(list(run_dir.glob("checkpoints/*/manifest.json")))
    return counts


def stored_counts(engine: Engine, run_id: int) -> dict[str, int]:
    with session_scope(engine) as s:
        series = s.scalars(select(MetricSeries).where(MetricSeries.run_id == run_id)).all()
        train = [x for x in series if x.kind == "train"]
        return {
            "metric_points": sum(x.num_points + x.num_superseded for x in train),
            "sample_steps": int(
                s.scalar(
                    select(func.coalesce(func.sum(SampleChunk.num_steps), 0)).where(
                        SampleChunk.run_id == run_id
                    )
                )
                or 0
            ),
            "sample_ids": int(
                s.scalar(
                    select(func.coalesce(func.sum(SampleChunk.num_ids), 0)).where(
                        SampleChunk.run_id == run_id
                    )
                )
                or 0
            ),
            "events": int(s.scalar(select(func.count()).where(Event.run_id == run_id)) or 0),
            "checkpoints": int(
                s.scalar(select(func.count()).where(Checkpoint.run_id == run_id)) or 0
            ),
        }


def segment_rows(engine: Engine, run_id: int) -> list[Segment]:
    with session_scope(engine) as s:
        return list(
            s.scalars(select(Segment).where(Segment.run_id == run_id).order_by(Segment.ordinal))
        )


def checkpoint_name(engine: Engine, checkpoint_id: int | None) -> str | None:
    if checkpoint_id is None:
        return None
    with session_scope(engine) as s:
        ckpt = s.get(Checkpoint, checkpoint_id)
        return ckpt.name if ckpt else None


def table_counts(engine: Engine) -> dict[str, int]:
    with session_scope(engine) as s:
        return {
            model.__tablename__: int(s.scalar(select(func.count()).select_from(model)) or 0)
            for model in (Project, Run, Segment, Event, MetricSeries, SampleChunk, Checkpoint)
        }


def expected_verdict(truth: dict) -> str:
    """The verdict a labelled run's ``truth.json`` calls for."""
    critical = {"data_drift", "incomplete_checkpoint", "state_not_restored"}
    kinds = {s["kind"] for s in truth["suspect_resumes"]}
    if kinds & critical:
        return "fail"
    return "warn" if kinds or truth["checkpoint_spikes"] else "pass"

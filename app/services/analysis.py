"""Runs the analyzers on a stored run and stores findings, verdicts and repair advice."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from app.analysis.model import CheckpointInfo, RunData, SegmentInfo, Series, Trace
from app.analysis.report import AnalysisReport, analyze_run
from app.models import Checkpoint, Finding, MetricSeries, Run, SampleChunk, Segment
from app.services import run_telemetry
from app.services.metrics import SeriesPoints, read_points
from app.store.arrays import INT32, INT64, UINT16, unpack

ANALYZED_METRICS = ("loss", "lr", "grad_norm", "loss_scale")


def analyze(*, session: Session, run_id: int) -> AnalysisReport:
    """Analyze a run and replace its findings and verdicts in the caller's transaction."""
    run = session.get(Run, run_id)
    if run is None:
        raise LookupError(f"run {run_id} does not exist")
    report = analyze_run(load_run_data(session=session, run=run))
    session.execute(delete(Finding).where(Finding.run_id == run_id))
    segment_ids = dict(
        session.execute(select(Segment.ordinal, Segment.id).where(Segment.run_id == run_id)).all()
    )
    rows = [
        {
            "run_id": run_id,
            "segment_id": segment_ids.get(f.segment) if f.segment is not None else None,
            "segment": f.segment,
            "kind": f.kind,
            "severity": f.severity,
            "step": f.step,
            "step_end": f.step_end,
            "resume_from_step": f.resume_from_step,
            "message": f.message,
            "evidence": _jsonable(f.evidence),
        }
        for f in report.findings
    ]
    if rows:
        session.execute(insert(Finding), rows)
    verdicts = {v.name: v for v in report.checkpoints}
    for ckpt in session.scalars(select(Checkpoint).where(Checkpoint.run_id == run_id)):
        verdict = verdicts.get(ckpt.name)
        ckpt.verdict = None if verdict is None else ("safe" if verdict.safe else "unsafe")
        ckpt.verdict_reasons = None if verdict is None else verdict.reasons
    run.verdict = report.verdict
    run.analyzed_at = datetime.now(UTC)
    run.analysis = {
        "epoch_plan": report.epoch_plan,
        "sampler": report.sampler,
        "counts": _severity_counts(report),
        "coverage": report.coverage,
    }
    return report


def _severity_counts(report: AnalysisReport) -> dict[str, int]:
    counts = {"critical": 0, "warning": 0, "info": 0}
    for finding in report.findings:
        counts[finding.severity] += 1
    return counts


def load_run_data(*, session: Session, run: Run) -> RunData:
    checkpoints = list(
        session.scalars(
            select(Checkpoint).where(Checkpoint.run_id == run.id).order_by(Checkpoint.step)
        )
    )
    names = {c.id: (c.name, c.step) for c in checkpoints}
    segments = [
        SegmentInfo(
            ordinal=s.ordinal,
            start_step=s.start_step,
            end_step=s.end_step,
            resumed_from=s.resumed_from,
            checkpoint=names.get(s.resumed_from_checkpoint_id or -1, (None, None))[0],
            checkpoint_step=names.get(s.resumed_from_checkpoint_id or -1, (None, None))[1],
            restored=s.restored,
            started_at=_ts(s.started_at),
            ended_at=_ts(s.ended_at),
            exit_reason=s.exit_reason,
        )
        for s in session.scalars(
            select(Segment).where(Segment.run_id == run.id).order_by(Segment.ordinal)
        )
    ]
    metrics: dict[str, Series] = {}
    replayed: dict[str, Series] = {}
    for series in session.scalars(
        select(MetricSeries).where(
            MetricSeries.run_id == run.id, MetricSeries.key.in_(ANALYZED_METRICS)
        )
    ):
        metrics[series.key] = _series(read_points(session=session, series_id=series.id))
        if series.num_superseded:
            replayed[series.key] = _series(
                read_points(session=session, series_id=series.id, superseded=True)
            )
    return RunData(
        segments=segments,
        checkpoints=[_checkpoint(c) for c in checkpoints],
        metrics=metrics,
        replayed_metrics=replayed,
        trace=_trace(session, run.id, superseded=False),
        replayed_trace=_trace(session, run.id, superseded=True),
        dataset_size=run.dataset_size,
        global_batch_size=run.global_batch_size,
        config=run.config or {},
        telemetry=run_telemetry.traces(session, run),
    )


def _series(points: SeriesPoints) -> Series:
    return Series(points.steps, points.values, points.times, points.segments)


def _trace(session: Session, run_id: int, *, superseded: bool) -> Trace | None:
    rows = session.execute(
        select(
            SampleChunk.steps,
            SampleChunk.counts,
            SampleChunk.ids,
            SampleChunk.segments,
            SampleChunk.id_dtype,
        )
        .where(SampleChunk.run_id == run_id, SampleChunk.superseded == superseded)
        .order_by(SampleChunk.seq)
    ).all()
    if not rows:
        return None
    return Trace(
        steps=np.concatenate([unpack(r.steps, INT64) for r in rows]),
        counts=np.concatenate([unpack(r.counts, INT32) for r in rows]).astype(np.int64),
        ids=np.concatenate([unpack(r.ids, r.id_dtype) for r in rows]).astype(np.int64, copy=False),
        segments=np.concatenate([unpack(r.segments, UINT16) for r in rows]),
    )


def _checkpoint(c: Checkpoint) -> CheckpointInfo:
    return CheckpointInfo(
        name=c.name,
        step=c.step,
        save_started_at=_ts(c.save_started_at),
        save_ended_at=_ts(c.save_ended_at),
        consumed_samples=c.consumed_samples,
        epoch=c.epoch,
        consumed_in_epoch=c.consumed_in_epoch,
        seed=c.seed,
        shuffle=c.shuffle,
        dataset_size=c.dataset_size,
        global_batch_size=c.global_batch_size,
        components=frozenset(comp.name for comp in c.components),
        data_state=c.data_state,
    )


def _ts(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def _jsonable(value: object) -> object:
    """Evidence as plain JSON types (numpy scalars and arrays become Python values)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value

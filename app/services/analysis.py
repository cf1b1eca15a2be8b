"""Runs the analyzers on a stored run and stores findings, verdicts and repair advice.

A large run's coverage may come from an analysis in parts (``analysis_parts``): ``analyze``
then merges the parts' epoch summaries and reads the trace paged, never whole.
"""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from app.analysis.coverage_parts import EpochSummary, MergedCoverage
from app.analysis.epochs import EpochPlan, plan_epochs
from app.analysis.model import CheckpointInfo, RunData, SegmentInfo, Series, Trace
from app.analysis.report import AnalysisReport, analyze_run
from app.models import AnalysisBatch, Checkpoint, Finding, MetricSeries, Run, Segment
from app.services import run_telemetry, traces
from app.services.metrics import SeriesPoints, read_points
from app.store.summaries import decode_summaries

ANALYZED_METRICS = ("loss", "lr", "grad_norm", "loss_scale")


class StaleAnalysis(Exception):
    """The parts of an analysis were computed from data a newer ingest has replaced."""


def analyze(*, session: Session, run_id: int, batch_id: int | None = None) -> AnalysisReport:
    """Analyze a run and replace its findings and verdicts in the caller's transaction.

    ``batch_id``: merge that analysis batch's finished parts (and delete the batch) instead of
    counting the coverage here."""
    run = session.get(Run, run_id)
    if run is None:
        raise LookupError(f"run {run_id} does not exist")
    if batch_id is None:
        report = analyze_run(load_run_data(session=session, run=run))
    else:
        report = _merge_batch(session, run, batch_id)
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


def _merge_batch(session: Session, run: Run, batch_id: int) -> AnalysisReport:
    batch = session.get(AnalysisBatch, batch_id)
    if batch is None or batch.run_id != run.id:
        raise LookupError(f"analysis batch {batch_id} of run {run.id} does not exist")
    if batch.generation != run.data_generation:
        raise StaleAnalysis(
            f"analysis batch {batch_id} read generation {batch.generation} of run {run.id},"
            f" which now holds generation {run.data_generation}"
        )
    summaries: list[EpochSummary] = []
    for part in batch.items:
        if part.summary is None:
            raise ValueError(f"part {part.ordinal} of analysis batch {batch_id} is not done")
        summaries.extend(decode_summaries(part.summary))
    data = load_run_data(session=session, run=run, paged=True)
    assert data.trace is not None
    coverage = MergedCoverage(EpochPlan(**batch.plan), summaries, data.trace)
    report = analyze_run(data, coverage=coverage)
    session.delete(batch)
    return report


def plan_run(*, session: Session, run: Run) -> tuple[EpochPlan | None, Trace | None]:
    """The run's epoch plan, and its effective trace paged (the plan reads only the ids of the
    trace's head, or every chunk once for the largest id when the run declares no dataset
    size)."""
    trace = traces.read_paged(session, run.id)
    checkpoints = _checkpoint_rows(session, run)
    data = RunData(
        segments=_segments(session, run, checkpoints),
        checkpoints=[_checkpoint(c) for c in checkpoints],
        trace=trace,
        dataset_size=run.dataset_size,
        global_batch_size=run.global_batch_size,
        config=run.config or {},
    )
    return plan_epochs(data), trace


def _severity_counts(report: AnalysisReport) -> dict[str, int]:
    counts = {"critical": 0, "warning": 0, "info": 0}
    for finding in report.findings:
        counts[finding.severity] += 1
    return counts


def load_run_data(*, session: Session, run: Run, paged: bool = False) -> RunData:
    """Everything the analyzers read; ``paged``: the effective trace's ids stay in the database
    and are read when asked (valid while ``session`` is open)."""
    checkpoints = _checkpoint_rows(session, run)
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
        segments=_segments(session, run, checkpoints),
        checkpoints=[_checkpoint(c) for c in checkpoints],
        metrics=metrics,
        replayed_metrics=replayed,
        trace=traces.read_paged(session, run.id)
        if paged
        else traces.read_trace(session, run.id, superseded=False),
        replayed_trace=traces.read_trace(session, run.id, superseded=True),
        dataset_size=run.dataset_size,
        global_batch_size=run.global_batch_size,
        config=run.config or {},
        telemetry=run_telemetry.traces(session, run),
    )


def _checkpoint_rows(session: Session, run: Run) -> list[Checkpoint]:
    return list(
        session.scalars(
            select(Checkpoint).where(Checkpoint.run_id == run.id).order_by(Checkpoint.step)
        )
    )


def _segments(session: Session, run: Run, checkpoints: list[Checkpoint]) -> list[SegmentInfo]:
    names = {c.id: (c.name, c.step) for c in checkpoints}
    return [
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


def _series(points: SeriesPoints) -> Series:
    return Series(points.steps, points.values, points.times, points.segments)


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

"""Turns a parsed run into rows: segments, events, checkpoints and compact metric/sample chunks.

All of a run's data is replaced inside the caller's transaction, so a run is either shown with
everything a source held or not changed at all.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import delete, insert
from sqlalchemy.orm import Session

from app.analysis.downsample import minmax_indices
from app.analysis.history import split_effective
from app.analysis.segments import (
    LifecycleEvent,
    SegmentSpec,
    assign_rows,
    complete_from_rows,
    infer_segments,
    segments_from_events,
    unexpected_restarts,
)
from app.ingest.errors import IngestError, Warnings
from app.ingest.records import MetricTable, ParsedRun, SampleTrace
from app.models import (
    Checkpoint,
    CheckpointComponent,
    Event,
    Finding,
    MetricChunk,
    MetricSeries,
    Run,
    SampleChunk,
    Segment,
)
from app.services.storable import fit_for_storage
from app.services.tags import add_tags, source_tags
from app.store.arrays import (
    FLOAT64,
    INT32,
    INT64,
    UINT16,
    chunk_ranges,
    id_dtype,
    pack,
    pack_points,
    step_chunks,
)

METRIC_CHUNK_POINTS = 65_536
PREVIEW_POINTS = 4000
MAX_SEGMENTS = 2**16 - 1  # segment ordinals are stored as uint16
SAMPLE_CHUNK_IDS = 1 << 20
SAMPLE_CHUNK_STEPS = 65_536


@dataclass
class RunLayout:
    """Segments and the segment ordinal of every logged row, derived before anything is written."""

    segments: list[SegmentSpec]
    metric_ordinals: np.ndarray
    eval_ordinals: np.ndarray | None
    sample_ordinals: np.ndarray | None
    counts: dict[str, int] = field(default_factory=dict)


def plan_layout(parsed: ParsedRun, warnings: Warnings) -> RunLayout:
    fit_for_storage(parsed, warnings)  # first: names, JSON and numbers the columns hold
    metrics = parsed.metrics
    lifecycle = [
        LifecycleEvent(
            kind=e.kind,
            step=e.step,
            time=e.time,
            resumed_from=_str_or_none(e.payload.get("resumed_from")),
            restored=_str_list(e.payload.get("restored")),
            reason=_str_or_none(e.payload.get("reason")),
        )
        for e in parsed.events
        if e.kind in ("process_start", "process_exit")
    ]
    segments = segments_from_events(lifecycle)
    _snap_to_checkpoints(segments, [c.step for c in parsed.checkpoints])
    if not segments:
        saves = [
            (c.time_start, c.time_end)
            for c in parsed.checkpoints
            if c.time_start is not None and c.time_end is not None
        ]
        steps = [c.step for c in parsed.checkpoints]
        segments = infer_segments(metrics.steps, metrics.times, saves, steps)
    if len(segments) > MAX_SEGMENTS:
        raise IngestError(
            f"{len(segments)} process lifetimes (starts recorded, or the step going back or"
            f" repeating), more than the {MAX_SEGMENTS} a run can hold; is the step the"
            " optimizer step, counted across restarts?",
            file=parsed.source_name,
        )
    metric_ordinals = assign_rows(metrics.steps, segments, metrics.times)
    for row in unexpected_restarts(metrics.steps, metric_ordinals)[:3]:
        warnings.add(
            f"metrics: step goes back to {int(metrics.steps[row])} with no process start recorded"
            " there",
            kind="unrecorded-restart",
        )
    eval_ordinals = None
    if parsed.evals is not None:
        eval_ordinals = assign_rows(parsed.evals.steps, segments, parsed.evals.times)
    sample_ordinals = None
    if parsed.samples is not None:
        sample_ordinals = assign_rows(parsed.samples.steps, segments)
    # only now: end steps taken from the metric rows must not split the other logs
    complete_from_rows(segments, metrics.steps, metric_ordinals, metrics.times)
    return RunLayout(segments, metric_ordinals, eval_ordinals, sample_ordinals)


def _snap_to_checkpoints(segments: list[SegmentSpec], checkpoint_steps: list[int]) -> None:
    """A resumed process that does not name its checkpoint started from the latest one at or
    before its first step (readers only know the first step it logged)."""
    saved = sorted(set(checkpoint_steps))
    for seg in segments[1:]:
        if seg.resumed_from is None and seg.start_step is not None:
            before = bisect_right(saved, seg.start_step)
            if before and saved[before - 1] != seg.start_step:
                seg.start_step = saved[before - 1]


def replace_run_data(
    session: Session, run: Run, parsed: ParsedRun, layout: RunLayout
) -> dict[str, int]:
    """Delete what the run held and write the parsed source in its place. Returns row counts."""
    for model in (Finding, Event, MetricSeries, SampleChunk, Segment, Checkpoint):
        session.execute(delete(model).where(model.run_id == run.id))
    run.data_generation = (run.data_generation or 0) + 1  # parts of older analyses are stale
    session.flush()

    checkpoints = _write_checkpoints(session, run, parsed)
    segment_ids = _write_segments(session, run, layout, checkpoints)
    counts: dict[str, int] = {"segments": len(layout.segments), "checkpoints": len(checkpoints)}
    counts["events"] = _write_events(session, run, parsed, layout, segment_ids)
    counts.update(_write_metrics(session, run, parsed.metrics, layout.metric_ordinals, "train"))
    if parsed.evals is not None and layout.eval_ordinals is not None:
        evals = _write_metrics(session, run, parsed.evals, layout.eval_ordinals, "eval")
        counts["eval_points"] = evals["metric_points"]
        counts["eval_series"] = evals["metric_series"]
    if parsed.samples is not None and layout.sample_ordinals is not None:
        counts.update(_write_samples(session, run, parsed.samples, layout.sample_ordinals))

    effective_steps, _ = split_effective(parsed.metrics.steps)
    steps = parsed.metrics.steps[effective_steps]
    run.first_step = int(steps.min()) if steps.size else None
    run.last_step = int(steps.max()) if steps.size else None
    run.num_steps = int(steps.size)
    run.num_segments = len(layout.segments)
    run.dataset_size = parsed.dataset_size
    run.global_batch_size = parsed.global_batch_size
    run.config = parsed.config
    add_tags(session, run.id, source_tags(parsed.config or {}))
    run.external_id = parsed.external_id
    run.source_format = parsed.source_format
    run.status = _status(layout.segments, recorded=parsed.source_format == "run_directory")
    run.started_at = _dt(layout.segments[0].started_at) if layout.segments else None
    run.ended_at = _dt(layout.segments[-1].ended_at) if layout.segments else None
    return counts


def _status(segments: list[SegmentSpec], *, recorded: bool) -> str:
    """finished / crashed from the last exit; running only when the training loop itself
    records process events (readers of other formats infer starts, never a live process)."""
    if not segments:
        return "unknown"
    last = segments[-1]
    if last.exit_reason is None:
        return "running" if recorded and last.source == "events" else "unknown"
    return (
        "finished" if last.exit_reason in ("finished", "completed", "exit", "done") else "crashed"
    )


def _write_checkpoints(session: Session, run: Run, parsed: ParsedRun) -> list[Checkpoint]:
    rows = []
    for rec in parsed.checkpoints:
        ckpt = Checkpoint(
            run_id=run.id,
            name=rec.name,
            step=rec.step,
            save_started_at=_dt(rec.time_start),
            save_ended_at=_dt(rec.time_end),
            consumed_samples=rec.consumed_samples,
            epoch=rec.epoch,
            consumed_in_epoch=rec.consumed_in_epoch,
            seed=rec.seed,
            shuffle=rec.shuffle,
            dataset_size=rec.dataset_size,
            global_batch_size=rec.global_batch_size,
            data_state=rec.data_state,
            manifest=rec.manifest,
            components=[
                CheckpointComponent(name=name, file=comp.file, bytes=comp.bytes)
                for name, comp in sorted(rec.components.items())
            ],
        )
        rows.append(ckpt)
    session.add_all(rows)
    session.flush()
    return rows


def _write_segments(
    session: Session, run: Run, layout: RunLayout, checkpoints: list[Checkpoint]
) -> dict[int, int]:
    by_name = {c.name: c for c in checkpoints}
    by_step = {c.step: c for c in checkpoints}
    n = len(layout.segments)
    metric = np.bincount(layout.metric_ordinals, minlength=n)
    sample = (
        np.bincount(layout.sample_ordinals, minlength=n)
        if layout.sample_ordinals is not None
        else np.zeros(n, dtype=np.int64)
    )
    rows = []
    for spec in layout.segments:
        ckpt = None
        if spec.resumed_from:
            ckpt = by_name.get(spec.resumed_from.rstrip("/").rsplit("/", 1)[-1])
        if ckpt is None and spec.ordinal > 0 and spec.start_step is not None:
            ckpt = by_step.get(spec.start_step)
        rows.append(
            Segment(
                run_id=run.id,
                ordinal=spec.ordinal,
                start_step=spec.start_step,
                end_step=spec.end_step,
                resumed_from=spec.resumed_from,
                resumed_from_checkpoint_id=ckpt.id if ckpt is not None else None,
                restored=spec.restored,
                started_at=_dt(spec.started_at),
                ended_at=_dt(spec.ended_at),
                exit_reason=spec.exit_reason,
                num_metric_rows=int(metric[spec.ordinal]) if spec.ordinal < metric.size else 0,
                num_sample_steps=int(sample[spec.ordinal]) if spec.ordinal < sample.size else 0,
            )
        )
    session.add_all(rows)
    session.flush()
    return {row.ordinal: row.id for row in rows}


def _write_events(
    session: Session,
    run: Run,
    parsed: ParsedRun,
    layout: RunLayout,
    segment_ids: dict[int, int],
) -> int:
    if not parsed.events:
        return 0
    rows: list[dict[str, Any]] = []
    ordinal = -1
    for event in parsed.events:
        if event.kind == "process_start":
            ordinal += 1
        seg = segment_ids.get(max(ordinal, 0))
        rows.append(
            {
                "run_id": run.id,
                "segment_id": seg,
                "kind": event.kind,
                "step": event.step,
                "occurred_at": _dt(event.time),
                "payload": event.payload,
            }
        )
    session.execute(insert(Event), rows)
    return len(rows)


def _write_metrics(
    session: Session, run: Run, table: MetricTable, ordinals: np.ndarray, kind: str
) -> dict[str, int]:
    points = superseded_points = 0
    chunk_rows: list[dict[str, Any]] = []
    for key in sorted(table.columns):
        rows, values = table.columns[key]
        steps = table.steps[rows]
        times = table.times[rows]
        segs = ordinals[rows]
        effective, superseded = split_effective(steps)
        finite = values[effective][np.isfinite(values[effective])]
        series = MetricSeries(
            run_id=run.id,
            key=key,
            source_key=table.source_keys.get(key, key),
            kind=kind,
            num_points=int(effective.size),
            num_superseded=int(superseded.size),
            first_step=int(steps[effective[0]]) if effective.size else None,
            last_step=int(steps[effective[-1]]) if effective.size else None,
            min_value=float(finite.min()) if finite.size else None,
            max_value=float(finite.max()) if finite.size else None,
            preview=_preview(steps[effective], values[effective], segs[effective]),
        )
        session.add(series)
        session.flush()
        for is_superseded, index in ((False, effective), (True, superseded)):
            for seq, (lo, hi) in enumerate(chunk_ranges(index.size, METRIC_CHUNK_POINTS)):
                part = index[lo:hi]
                chunk_steps = steps[part]
                chunk_rows.append(
                    {
                        "series_id": series.id,
                        "superseded": is_superseded,
                        "seq": seq,
                        "first_step": int(chunk_steps[0]),
                        "last_step": int(chunk_steps[-1]),
                        "count": int(part.size),
                        "steps": pack(chunk_steps, INT64),
                        "values": pack(values[part], FLOAT64),
                        "times": pack(times[part], FLOAT64),
                        "segments": pack(segs[part], UINT16),
                    }
                )
        points += int(rows.size)
        superseded_points += int(superseded.size)
    if chunk_rows:
        session.execute(insert(MetricChunk), chunk_rows)
    return {
        "metric_series": len(table.columns),
        "metric_points": points,
        "metric_rows": table.num_rows,
        "superseded_points": superseded_points,
    }


def _preview(steps: np.ndarray, values: np.ndarray, segments: np.ndarray) -> bytes | None:
    if steps.size <= PREVIEW_POINTS:
        return None
    keep = minmax_indices(values, PREVIEW_POINTS)
    return pack_points(steps[keep], values[keep], segments[keep])


def _write_samples(
    session: Session, run: Run, trace: SampleTrace, ordinals: np.ndarray
) -> dict[str, int]:
    offsets = trace.offsets
    dtype = id_dtype(trace.ids)
    effective, superseded = split_effective(trace.steps)
    rows: list[dict[str, Any]] = []
    for is_superseded, index in ((False, effective), (True, superseded)):
        counts = trace.counts[index]
        for seq, (lo, hi) in enumerate(step_chunks(counts, SAMPLE_CHUNK_IDS, SAMPLE_CHUNK_STEPS)):
            part = index[lo:hi]
            ids = _gather(trace.ids, offsets, part)
            rows.append(
                {
                    "run_id": run.id,
                    "superseded": is_superseded,
                    "seq": seq,
                    "first_step": int(trace.steps[part[0]]),
                    "last_step": int(trace.steps[part[-1]]),
                    "num_steps": int(part.size),
                    "num_ids": int(ids.size),
                    "id_dtype": dtype,
                    "steps": pack(trace.steps[part], INT64),
                    "counts": pack(trace.counts[part], INT32),
                    "ids": pack(ids, dtype),
                    "segments": pack(ordinals[part], UINT16),
                }
            )
            if len(rows) >= 64:
                session.execute(insert(SampleChunk), rows)
                rows = []
    if rows:
        session.execute(insert(SampleChunk), rows)
    return {
        "sample_steps": int(trace.steps.size),
        "sample_ids": int(trace.ids.size),
        "superseded_sample_steps": int(superseded.size),
    }


def _gather(ids: np.ndarray, offsets: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Concatenate the id lists of ``rows``; contiguous runs of rows are sliced, not looped."""
    if rows.size == 0:
        return ids[:0]
    if bool((np.diff(rows) == 1).all()):
        return ids[offsets[rows[0]] : offsets[rows[-1] + 1]]
    return np.concatenate([ids[offsets[r] : offsets[r + 1]] for r in rows.tolist()])


def _dt(value: float | None) -> datetime | None:
    """A unix time as a datetime; None for none, or one outside the years 1..9999."""
    if value is None or not _FIRST_DAY <= value < _AFTER_LAST_DAY:
        return None
    return datetime.fromtimestamp(value, UTC)


_FIRST_DAY = datetime(1, 1, 2, tzinfo=UTC).timestamp()
_AFTER_LAST_DAY = datetime(9999, 12, 31, tzinfo=UTC).timestamp()


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _str_list(value: Any) -> list[str] | None:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    return None

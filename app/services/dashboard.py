"""What the dashboard shows, assembled server-side: downsampled series, the coverage grid stored
by the analysis, segments, checkpoints, findings and GPU telemetry of one run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app.analysis.model import REQUIRED_COMPONENTS
from app.models import Run
from app.services import metrics as metric_service
from app.services import run_telemetry
from app.services import runs as run_service
from app.services.findings import finding_dict, list_findings
from app.services.telemetry_store import series_payload

MAX_POINTS = 2000
REPLAYED_POINTS = 300  # drawn as markers: each is a DOM node, so fewer
DEFAULT_METRICS = ("loss",)


@dataclass
class RunView:
    """One run, ready to draw. Series are ``{"steps", "values", "segments"}`` lists."""

    run: dict[str, Any]
    metric_keys: list[str]
    series: dict[str, dict[str, list[Any]]]
    replayed: dict[str, dict[str, list[Any]]]
    segments: list[dict[str, Any]]
    checkpoints: list[dict[str, Any]]
    findings: list[dict[str, Any]]
    coverage: dict[str, Any] | None
    telemetry: list[dict[str, Any]] = field(default_factory=list)


def run_view(
    *,
    session: Session,
    run_id: int,
    metrics: tuple[str, ...] | list[str] = DEFAULT_METRICS,
    max_points: int = MAX_POINTS,
    telemetry_metric: str | None = "power",
) -> RunView | None:
    run = run_service.get_run(session=session, run_id=run_id)
    if run is None:
        return None
    all_series = run_service.series(session=session, run_id=run_id)
    keys = [s.key for s in all_series]
    wanted = [k for k in dict.fromkeys([*metrics, "lr"]) if k in keys]
    series: dict[str, dict[str, list[Any]]] = {}
    replayed: dict[str, dict[str, list[Any]]] = {}
    for item in all_series:
        if item.key not in wanted:
            continue
        series[item.key] = _points(
            metric_service.display_points(session=session, series=item, max_points=max_points)
        )
        if item.num_superseded:
            old = metric_service.read_points(session=session, series_id=item.id, superseded=True)
            replayed[item.key] = _points(metric_service.downsample(old, REPLAYED_POINTS))
    return RunView(
        run=_run(run),
        metric_keys=keys,
        series=series,
        replayed=replayed,
        segments=[_segment(s) for s in run_service.segments(session=session, run_id=run_id)],
        checkpoints=[
            _checkpoint(c) for c in run_service.checkpoints(session=session, run_id=run_id)
        ],
        findings=[finding_dict(f) for f in list_findings(session=session, run_id=run_id)],
        coverage=(run.analysis or {}).get("coverage"),
        telemetry=_telemetry(session, run, telemetry_metric, max_points),
    )


def _run(run: Run) -> dict[str, Any]:
    return {
        "id": run.id,
        "name": run.name,
        "project": run.project.name,
        "status": run.status,
        "verdict": run.verdict,
        "num_steps": run.num_steps,
        "first_step": run.first_step,
        "last_step": run.last_step,
        "num_segments": run.num_segments,
        "dataset_size": run.dataset_size,
        "global_batch_size": run.global_batch_size,
        "source_format": run.source_format,
        "updated_at": run.updated_at.isoformat() if run.updated_at else None,
    }


def _points(points: metric_service.SeriesPoints) -> dict[str, list[Any]]:
    values = points.values
    return {
        "steps": points.steps.tolist(),
        "values": [None if not np.isfinite(v) else float(v) for v in values.tolist()],
        "segments": points.segments.astype(np.int64).tolist(),
    }


def _segment(seg: Any) -> dict[str, Any]:
    return {
        "ordinal": seg.ordinal,
        "start_step": seg.start_step,
        "end_step": seg.end_step,
        "resumed_from": seg.resumed_from,
        "restored": seg.restored,
        "exit_reason": seg.exit_reason,
        "started_at": seg.started_at.isoformat() if seg.started_at else None,
        "ended_at": seg.ended_at.isoformat() if seg.ended_at else None,
        "metric_rows": seg.num_metric_rows,
        "sample_steps": seg.num_sample_steps,
    }


def _checkpoint(ckpt: Any) -> dict[str, Any]:
    held = {c.name for c in ckpt.components}
    names = [*REQUIRED_COMPONENTS, *sorted(held - set(REQUIRED_COMPONENTS))]
    seconds = None
    if ckpt.save_started_at is not None and ckpt.save_ended_at is not None:
        seconds = (ckpt.save_ended_at - ckpt.save_started_at).total_seconds()
    return {
        "name": ckpt.name,
        "step": ckpt.step,
        "components": {name: name in held for name in names},
        "save_seconds": seconds,
        "consumed_samples": ckpt.consumed_samples,
        "epoch": ckpt.epoch,
        "verdict": ckpt.verdict,
        "reasons": ckpt.verdict_reasons or [],
    }


def _telemetry(
    session: Session, run: Run, metric: str | None, max_points: int
) -> list[dict[str, Any]]:
    if metric is None:
        return []
    span = run_telemetry.window(run)
    if span is None:
        return []
    axis = run_telemetry.step_axis(session, run)
    out = []
    for item in run_telemetry.run_series(session, run, metric):
        data = series_payload(session, item, *span, max_points)
        data["metric"] = metric
        data["steps"] = run_telemetry.to_steps(np.asarray(data["times"]), axis)
        data["times"] = np.asarray(data["times"]).tolist()
        out.append(data)
    return out

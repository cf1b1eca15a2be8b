"""Which GPUs a run used, and their telemetry on the run's wall-clock window, mapped to steps.

A run declares its GPUs in its config (``{"telemetry": {"nodes": [...], "gpus": [...],
"slurm_job": "...", "pod": "..."}}``, which the training-side logger fills in): series match
by host or node name (optionally narrowed to GPU UUIDs or indices), or by the Slurm job or
Kubernetes pod label the exporter attaches.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.analysis.model import TelemetryTrace
from app.models import Event, MetricSeries, Node, Run, TelemetrySeries
from app.services.metrics import read_points as read_metric_points
from app.services.telemetry_store import read_points

MARGIN_S = 120.0
ANALYSED = ("power", "gpu_util", "sm_active", "gr_engine_active", "xid")


def spec(run: Run, session: Session | None = None) -> dict[str, Any]:
    """The run's declared GPUs, plus where each of its processes said it ran (the training-side
    logger puts host, Slurm job and pod in every ``process_start``)."""
    declared = (run.config or {}).get("telemetry")
    out: dict[str, Any] = dict(declared) if isinstance(declared, dict) else {}
    if session is None:
        return out
    starts = session.scalars(
        select(Event.payload).where(Event.run_id == run.id, Event.kind == "process_start")
    ).all()
    hosts = list(out.get("nodes") or [])
    for payload in starts:
        host = (payload or {}).get("host")
        if isinstance(host, str) and host and host not in hosts:
            hosts.append(host)
        for key in ("slurm_job", "pod"):
            value = (payload or {}).get(key)
            if value and key not in out:
                out[key] = value
    if hosts:
        out["nodes"] = hosts
    return out


def run_series(session: Session, run: Run, metric: str | None = None) -> list[TelemetrySeries]:
    wanted = spec(run, session)
    hosts = {str(h) for h in wanted.get("nodes", []) or []}
    gpus = {str(g) for g in wanted.get("gpus", []) or []}
    slurm = wanted.get("slurm_job")
    pod = wanted.get("pod")
    if not (hosts or slurm or pod):
        return []
    query = select(TelemetrySeries, Node.name).join(Node, TelemetrySeries.node_id == Node.id)
    if metric is not None:
        query = query.where(TelemetrySeries.metric == metric)
    out = []
    for series, node_name in session.execute(query).all():
        labels = series.labels or {}
        by_host = series.host in hosts or node_name in hosts
        if by_host and gpus:
            by_host = series.gpu in gpus or str(series.gpu_index) in gpus
        by_job = slurm is not None and str(labels.get("hpc_job")) == str(slurm)
        by_pod = pod is not None and str(labels.get("pod")) == str(pod)
        if by_host or by_job or by_pod:
            out.append(series)
    return out


def window(run: Run) -> tuple[float, float] | None:
    declared = spec(run).get("window")
    if isinstance(declared, list) and len(declared) == 2:
        return float(declared[0]), float(declared[1])
    if run.started_at is None:
        return None
    end = run.ended_at.timestamp() if run.ended_at is not None else time.time()
    return run.started_at.timestamp() - MARGIN_S, end + MARGIN_S


def step_axis(session: Session, run: Run) -> tuple[np.ndarray, np.ndarray]:
    """(times, steps) of the run's logged steps, sorted by time, for mapping wall clock to steps."""
    series = session.scalars(
        select(MetricSeries)
        .where(MetricSeries.run_id == run.id, MetricSeries.kind == "train")
        .order_by(MetricSeries.num_points.desc())
        .limit(1)
    ).first()
    if series is None:
        return np.zeros(0), np.zeros(0)
    points = read_metric_points(session=session, series_id=series.id)
    keep = ~np.isnan(points.times)
    order = np.argsort(points.times[keep], kind="stable")
    return points.times[keep][order], points.steps[keep][order].astype(np.float64)


def traces(session: Session, run: Run, metrics: tuple[str, ...] = ANALYSED) -> list[TelemetryTrace]:
    span = window(run)
    if span is None:
        return []
    out = []
    for metric in metrics:
        for series in run_series(session, run, metric):
            points = read_points(session, series, *span)
            if points.times.size:
                out.append(
                    TelemetryTrace(
                        host=series.host,
                        gpu=series.gpu,
                        metric=metric,
                        times=points.times,
                        values=points.values,
                        labels=dict(series.labels or {}),
                    )
                )
    return out


def to_steps(times: np.ndarray, axis: tuple[np.ndarray, np.ndarray]) -> list[float | None]:
    axis_times, axis_steps = axis
    if axis_times.size < 2:
        return [None] * int(times.size)
    mapped = np.interp(times, axis_times, axis_steps)
    inside = (times >= axis_times[0]) & (times <= axis_times[-1])
    return [round(float(s), 2) if ok else None for s, ok in zip(mapped, inside, strict=True)]

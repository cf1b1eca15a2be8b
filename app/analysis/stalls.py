"""Checkpoint stalls seen on the GPUs: activity that collapses while a save is being written.

For every save window (start and end from the manifest or the save events) and every GPU with
telemetry around it, the GPU's busy level is the median of its activity in the minute before
the save; while saving, the share of readings below half of that level is the share of the save
the GPU stood idle. GPU-seconds lost = save duration x that share, summed over GPUs. Power is
the preferred activity signal, then SM / graphics-engine activity; GPU utilisation comes last,
because ranks blocked in a collective read 100 %. A save that leaves the GPUs busy did not stall
training (an asynchronous save) and gets no finding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.analysis.findings import CHECKPOINT_STALL, WARNING, Finding, fmt_int
from app.analysis.model import CheckpointInfo, RunData, TelemetryTrace

ACTIVITY = ("power", "sm_active", "gr_engine_active", "gpu_util")
UNITS = {"power": "W", "gpu_util": "%"}
BEFORE_S = 60.0
IDLE_SHARE = 0.5  # below this share of the busy level a GPU counts as idle
MIN_LOST_SHARE = 0.25  # a stall idles the GPUs for at least this share of the save


@dataclass
class GpuStall:
    host: str
    gpu: str
    busy: float
    during: float
    idle_share: float
    lost_s: float


def analyze_stalls(run: RunData) -> list[Finding]:
    metric, traces = _activity(run.telemetry)
    if not traces:
        return []
    findings = []
    for ckpt in run.checkpoints:
        seconds = ckpt.save_seconds
        if seconds is None or seconds <= 0 or ckpt.save_started_at is None:
            continue
        stalls = [s for s in (_gpu(t, ckpt, seconds) for t in traces) if s is not None]
        stalled = [s for s in stalls if s.idle_share >= MIN_LOST_SHARE]
        if stalled:
            findings.append(_finding(ckpt, seconds, metric, stalls, stalled))
    return findings


def _activity(telemetry: list[TelemetryTrace]) -> tuple[str, list[TelemetryTrace]]:
    for metric in ACTIVITY:
        traces = [t for t in telemetry if t.metric == metric and t.times.size]
        if traces:
            return metric, traces
    return "", []


def _gpu(trace: TelemetryTrace, ckpt: CheckpointInfo, seconds: float) -> GpuStall | None:
    start = float(ckpt.save_started_at or 0.0)
    end = start + seconds
    t, v = trace.times, trace.values
    before = v[(t >= start - BEFORE_S) & (t < start)]
    during = v[(t >= start) & (t <= end)]
    before, during = before[np.isfinite(before)], during[np.isfinite(during)]
    if before.size < 2 or during.size < 1:
        return None  # telemetry too coarse or absent around this save
    busy = float(np.median(before))
    if busy <= 0:
        return None
    idle_share = float(np.mean(during < IDLE_SHARE * busy))
    return GpuStall(
        host=trace.host,
        gpu=trace.gpu,
        busy=busy,
        during=float(np.median(during)),
        idle_share=idle_share,
        lost_s=seconds * idle_share,
    )


def _finding(
    ckpt: CheckpointInfo,
    seconds: float,
    metric: str,
    stalls: list[GpuStall],
    stalled: list[GpuStall],
) -> Finding:
    lost = sum(s.lost_s for s in stalled)
    unit = UNITS.get(metric, "")
    busy = float(np.median([s.busy for s in stalled]))
    during = float(np.median([s.during for s in stalled]))
    return Finding(
        kind=CHECKPOINT_STALL,
        severity=WARNING,
        message=(
            f"The checkpoint save at step {ckpt.step} stalled training: during its"
            f" {seconds:.1f} s the GPUs' {metric.replace('_', ' ')} fell from {busy:.3g}{unit}"
            f" to {during:.3g}{unit} on {len(stalled)} of {len(stalls)} GPUs;"
            f" {fmt_int(round(lost))} GPU-seconds lost (a blocking save)."
        ),
        step=ckpt.step,
        evidence={
            "checkpoint": ckpt.name,
            "save_seconds": seconds,
            "metric": metric,
            "gpu_seconds_lost": round(lost, 2),
            "blocking": True,
            "gpus": [
                {
                    "host": s.host,
                    "gpu": s.gpu,
                    "busy": round(s.busy, 3),
                    "during": round(s.during, 3),
                    "idle_share": round(s.idle_share, 3),
                    "lost_s": round(s.lost_s, 2),
                }
                for s in stalls
            ],
        },
    )

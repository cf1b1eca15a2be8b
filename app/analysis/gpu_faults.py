"""GPU faults before a crash, as context on the resume that followed: XID errors reported in
the minutes before the process died, and nodes whose telemetry stopped before it did."""

from __future__ import annotations

import numpy as np

from app.analysis.findings import GPU_FAULT, INFO, Finding
from app.analysis.model import RunData, SegmentInfo, TelemetryTrace

LOOKBACK_S = 600.0
SILENCE_FACTOR = 3.0  # a node is silent when its last reading is this many intervals old


def analyze_gpu_faults(run: RunData) -> list[Finding]:
    if not run.telemetry:
        return []
    findings = []
    by_ordinal = {s.ordinal: s for s in run.segments}
    for resume in run.resumes:
        before = by_ordinal.get(resume.ordinal - 1)
        if before is None or before.exit_reason not in (None, "crash", "unknown"):
            continue
        died = before.ended_at
        if died is None:
            continue
        xids = _xids(run.telemetry, died)
        silent = _silent_hosts(run.telemetry, died)
        if xids or silent:
            findings.append(_finding(before, resume, died, xids, silent))
    return findings


def _xids(telemetry: list[TelemetryTrace], died: float) -> list[dict[str, object]]:
    out = []
    for trace in telemetry:
        if trace.metric != "xid":
            continue
        near = (trace.times >= died - LOOKBACK_S) & (trace.times <= died + 60.0)
        codes = trace.values[near]
        times = trace.times[near]
        hit = np.flatnonzero(np.isfinite(codes) & (codes > 0))
        if hit.size:
            first = int(hit[0])
            out.append(
                {
                    "host": trace.host,
                    "gpu": trace.gpu,
                    "xid": int(codes[first]),
                    "seconds_before_crash": round(died - float(times[first]), 1),
                    "message": trace.labels.get("err_msg"),
                }
            )
    return out


def _silent_hosts(telemetry: list[TelemetryTrace], died: float) -> list[dict[str, object]]:
    last: dict[str, float] = {}
    intervals: dict[str, float] = {}
    for trace in telemetry:
        seen = trace.times[trace.times <= died]
        if seen.size:
            last[trace.host] = max(last.get(trace.host, -np.inf), float(seen[-1]))
        if trace.times.size > 2:
            intervals[trace.host] = float(np.median(np.diff(trace.times)))
    out = []
    for host, at in sorted(last.items()):
        interval = intervals.get(host)
        if interval and died - at > SILENCE_FACTOR * interval:
            out.append({"host": host, "silent_seconds_before_crash": round(died - at, 1)})
    return out


def _finding(
    before: SegmentInfo,
    resume: SegmentInfo,
    died: float,
    xids: list[dict[str, object]],
    silent: list[dict[str, object]],
) -> Finding:
    parts = [
        f"GPU {x['gpu']} on {x['host']} reported XID {x['xid']}"
        f" {x['seconds_before_crash']} s before it"
        for x in xids
    ] + [
        f"{s['host']} stopped answering {s['silent_seconds_before_crash']} s before it"
        for s in silent
    ]
    return Finding(
        kind=GPU_FAULT,
        severity=INFO,
        message=f"Before the crash at step {before.end_step}: {'; '.join(parts)}.",
        step=before.end_step,
        resume_from_step=resume.resume_step,
        segment=resume.ordinal,
        evidence={"crashed_at": died, "xid_errors": xids, "silent_nodes": silent},
    )

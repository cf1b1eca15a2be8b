from __future__ import annotations

import numpy as np

from app.analysis.findings import CHECKPOINT_STALL, GPU_FAULT
from app.analysis.gpu_faults import analyze_gpu_faults
from app.analysis.model import CheckpointInfo, RunData, SegmentInfo, TelemetryTrace
from app.analysis.stalls import analyze_stalls


def _power(gpu: str, times: np.ndarray, idle: list[tuple[float, float]]) -> TelemetryTrace:
    values = np.full(times.size, 630.0)
    for start, end in idle:
        values[(times >= start) & (times <= end)] = 72.0
    return TelemetryTrace("node-a", gpu, "power", times, values)


def _run(telemetry: list[TelemetryTrace], saves: list[tuple[int, float, float]]) -> RunData:
    return RunData(
        segments=[SegmentInfo(0, 0, 1000)],
        checkpoints=[CheckpointInfo(f"step_{s}", s, a, b) for s, a, b in saves],
        telemetry=telemetry,
    )


def test_a_blocking_save_costs_its_duration_on_every_idle_gpu() -> None:
    times = np.arange(0.0, 400.0, 1.0)
    saves = [(100, 100.0, 125.0), (200, 250.0, 260.0)]
    traces = [_power(g, times, [(100.0, 125.0)]) for g in ("GPU-a", "GPU-b")]
    (finding,) = analyze_stalls(_run(traces, saves))  # the save at 200 left the GPUs busy
    assert finding.kind == CHECKPOINT_STALL and finding.step == 100
    assert finding.evidence["gpu_seconds_lost"] == 50.0
    assert [g["lost_s"] for g in finding.evidence["gpus"]] == [25.0, 25.0]
    assert "fell from 630W to 72W on 2 of 2 GPUs; 50 GPU-seconds lost" in finding.message


def test_telemetry_too_coarse_for_a_save_says_nothing() -> None:
    times = np.arange(0.0, 400.0, 30.0)  # one reading every 30 s, a 5 s save between two
    traces = [_power("GPU-a", times, [(100.0, 105.0)])]
    assert analyze_stalls(_run(traces, [(100, 100.0, 105.0)])) == []


def test_xid_and_a_silent_node_before_a_crash_are_context_on_the_resume() -> None:
    times = np.arange(0.0, 500.0, 5.0)
    xid = np.zeros(times.size)
    xid[times >= 470] = 79
    node_b = times[times < 440]
    run = RunData(
        segments=[
            SegmentInfo(0, 0, 437, exit_reason="crash", ended_at=480.0),
            SegmentInfo(1, 400, 840, checkpoint="step_400", checkpoint_step=400),
        ],
        checkpoints=[],
        telemetry=[
            TelemetryTrace("node-a", "GPU-a", "xid", times, xid, {"err_msg": "fallen off the bus"}),
            TelemetryTrace("node-b", "GPU-c", "power", node_b, np.full(node_b.size, 600.0)),
        ],
    )
    (finding,) = analyze_gpu_faults(run)
    assert finding.kind == GPU_FAULT and finding.severity == "info"
    assert finding.resume_from_step == 400 and finding.step == 437
    assert finding.evidence["xid_errors"][0]["xid"] == 79
    assert finding.evidence["silent_nodes"] == [
        {"host": "node-b", "silent_seconds_before_crash": 45.0}
    ]

from __future__ import annotations

import numpy as np

from app.analysis.findings import CHECKPOINT_LOSS_SPIKE, LOSS_SPIKE, STEP_GAP
from app.analysis.model import CheckpointInfo, RunData, SegmentInfo, Series
from app.analysis.spikes import analyze_spikes, robust_z


def _run(loss: np.ndarray, steps: np.ndarray, saves: list[int]) -> RunData:
    series = Series(steps, loss, steps.astype(float), np.zeros(steps.size, dtype=np.uint16))
    return RunData(
        segments=[SegmentInfo(0, 0, int(steps[-1]))],
        checkpoints=[CheckpointInfo(f"step_{s}", s, 0.0, 25.0) for s in saves],
        metrics={"loss": series},
        global_batch_size=32,
    )


def _noisy(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.exp(rng.normal(np.log(np.linspace(2.0, 0.2, n)), 0.25))


def test_bad_batch_far_from_a_save_is_unattributed() -> None:
    steps = np.arange(1, 601)
    loss = _noisy(600)
    loss[311] *= 40  # step 312, twelve steps after the save at 300
    findings = analyze_spikes(_run(loss, steps, [100, 200, 300, 400, 500]))
    assert [(f.kind, f.step) for f in findings] == [(LOSS_SPIKE, 312)]
    assert findings[0].severity == "info"


def test_stall_after_a_save_is_a_gap_and_an_attributed_spike() -> None:
    steps = np.concatenate([np.arange(1, 201), np.arange(228, 601)])
    loss = _noisy(steps.size)
    loss[200] *= 6  # the first logged step after the gap
    findings = analyze_spikes(_run(loss, steps, [100, 200, 300, 400, 500]))
    kinds = sorted((f.kind, f.step) for f in findings)
    assert kinds == [(CHECKPOINT_LOSS_SPIKE, 200), (STEP_GAP, 200)]
    gap = next(f for f in findings if f.kind == STEP_GAP)
    assert gap.evidence["missing_steps"] == [201, 227]
    assert "Steps 201-227 are missing" in gap.message


def test_noise_alone_raises_nothing() -> None:
    steps = np.arange(1, 2001)
    assert analyze_spikes(_run(_noisy(2000, seed=5), steps, list(range(100, 2000, 100)))) == []


def test_robust_z_is_zero_without_history() -> None:
    z = robust_z(np.array([1.0, 2.0, 50.0]))
    assert z.tolist() == [0.0, 0.0, 0.0]

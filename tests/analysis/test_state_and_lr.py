from __future__ import annotations

import numpy as np

from app.analysis.findings import (
    CRITICAL,
    INCOMPLETE_CHECKPOINT,
    LR_DISCONTINUITY,
    STATE_NOT_RESTORED,
    WARNING,
)
from app.analysis.model import Series
from app.analysis.report import analyze_run
from tests.analysis.synth import COMPONENTS, build_run


def _bad(report) -> list[tuple[str, str]]:
    return [(f.kind, f.severity) for f in report.findings if f.severity != "info"]


def test_optimizer_not_restored_is_critical() -> None:
    report = analyze_run(build_run(fault="exact", restored=COMPONENTS - {"optimizer"}))
    assert _bad(report) == [(STATE_NOT_RESTORED, CRITICAL)]
    assert "did not restore the optimizer state" in report.findings[0].message


def test_checkpoint_without_optimizer_is_incomplete() -> None:
    run = build_run(
        fault="exact", components=COMPONENTS - {"optimizer"}, restored=COMPONENTS - {"optimizer"}
    )
    report = analyze_run(run)
    assert _bad(report) == [(INCOMPLETE_CHECKPOINT, CRITICAL)]
    assert all(not v.safe and "lacks optimizer state" in v.reasons for v in report.checkpoints)


def test_incomplete_checkpoints_in_a_run_without_resumes_are_a_warning() -> None:
    report = analyze_run(build_run(components=COMPONENTS - {"rng"}))
    assert _bad(report) == [(INCOMPLETE_CHECKPOINT, WARNING)]


def test_loader_state_not_restored_but_data_verified_is_info() -> None:
    report = analyze_run(build_run(fault="exact", restored=COMPONENTS - {"dataloader"}))
    assert _bad(report) == []
    (state,) = [f for f in report.findings if f.kind == STATE_NOT_RESTORED]
    assert state.severity == "info"
    assert "the sample trace shows the data continued as designed" in state.message


def test_lr_schedule_restarting_warmup_is_a_discontinuity() -> None:
    run = build_run(fault="exact", restored=COMPONENTS - {"scheduler"})
    lr = run.metrics["lr"]
    values = lr.values.copy()
    after = lr.steps > 120
    values[after] = 1e-3 * np.minimum((lr.steps[after] - 120) / 50, 1.0)  # warm-up again
    run.metrics["lr"] = Series(lr.steps, values, lr.times, lr.segments)
    report = analyze_run(run)
    assert _bad(report) == [(LR_DISCONTINUITY, WARNING)]
    finding = report.findings[0]
    assert finding.evidence["restarted_warmup"] is True
    assert "restarted its warm-up" in finding.message
    assert "scheduler" in finding.evidence["cause"]


def test_continuous_lr_is_not_flagged() -> None:
    report = analyze_run(build_run(fault="exact"))
    assert _bad(report) == []


def _step_schedule(run, at_resume: float) -> None:
    """StepLR: 1e-3 halved every 40 steps; ``at_resume`` is the LR logged after step 120."""
    lr = run.metrics["lr"]
    values = 1e-3 * 0.5 ** ((lr.steps - 1) // 40)
    values[lr.steps > 120] = at_resume * 0.5 ** ((lr.steps[lr.steps > 120] - 121) // 40)
    run.metrics["lr"] = Series(lr.steps, values.astype(float), lr.times, lr.segments)


def test_a_scheduled_drop_at_the_resume_step_is_not_a_discontinuity() -> None:
    run = build_run(fault="exact")
    run.replayed_metrics = {}
    _step_schedule(run, at_resume=1e-3 * 0.5**3)  # step 121 is a scheduled drop
    assert _bad(analyze_run(run)) == []


def test_a_step_schedule_back_at_its_base_lr_is_a_discontinuity() -> None:
    run = build_run(fault="exact", restored=COMPONENTS - {"scheduler"})
    run.replayed_metrics = {}
    _step_schedule(run, at_resume=1e-3)
    assert _bad(analyze_run(run)) == [(LR_DISCONTINUITY, WARNING)]

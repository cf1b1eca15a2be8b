from __future__ import annotations

from app.analysis.epochs import plan_epochs
from app.analysis.truth import score
from tests.analysis.synth import build_run


def test_epoch_plan_comes_from_the_first_repeat_in_the_trace() -> None:
    run = build_run(fault="exact", n=403, batch=8)
    plan = plan_epochs(run)
    assert plan is not None
    assert (plan.steps_per_epoch, plan.source) == (50, "trace")
    assert plan.position(121 * 8) == (2, 21 * 8)


def test_epoch_plan_falls_back_to_manifests_then_sizes() -> None:
    run = build_run(fault="exact")
    run.trace = None
    plan = plan_epochs(run)
    assert plan is not None and (plan.steps_per_epoch, plan.source) == (50, "manifests")
    for ckpt in run.checkpoints:
        ckpt.epoch = None
    plan = plan_epochs(run)
    assert plan is not None and (plan.steps_per_epoch, plan.source) == (50, "dataset size")


def test_truth_scoring_counts_claims_and_forgives_the_gap_of_a_stall() -> None:
    truth = {
        "suspect_resumes": [{"at": 300, "kind": "data_drift"}],
        "checkpoint_spikes": [200],
    }
    findings = [
        {"kind": "resume_data_drift", "severity": "critical", "resume_from_step": 300, "step": 301},
        {"kind": "checkpoint_loss_spike", "severity": "warning", "step": 200},
        {"kind": "step_gap", "severity": "warning", "step": 200},
        {"kind": "loss_spike", "severity": "info", "step": 612},
    ]
    assert score(truth, findings).exact
    extra = [
        *findings,
        {"kind": "lr_discontinuity", "severity": "warning", "step": 501, "resume_from_step": 500},
    ]
    result = score(truth, extra)
    assert result.false_alarms == {(500, "lr_discontinuity")} and not result.missed

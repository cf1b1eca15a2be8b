from __future__ import annotations

from app.analysis.epochs import plan_epochs
from app.analysis.findings import RESUME_DATA_DRIFT, RESUME_ORDER_DIVERGENCE, WARNING
from app.analysis.order import analyze_order
from app.analysis.report import analyze_run
from tests.analysis.synth import build_run


def test_forgotten_set_epoch_is_an_order_repeat_not_drift() -> None:
    run = build_run(fault="set_epoch_forgotten")
    report = analyze_run(run)
    (finding,) = [f for f in report.findings if f.severity != "info"]
    assert finding.kind == RESUME_ORDER_DIVERGENCE and finding.severity == WARNING
    assert finding.resume_from_step == 120
    repeats = finding.evidence["repeated_epochs"]
    assert [r["epoch"] for r in repeats] == [3, 4, 5]
    assert {r["same_order_as"] for r in repeats} == {2}
    assert report.verdict == "warn"


def test_replayed_steps_are_compared_with_the_first_run_of_them() -> None:
    exact = analyze_order(build_run(fault="exact"), plan_epochs(build_run(fault="exact")))
    assert exact.findings == []
    assert exact.per_resume[1]["replayed_steps"] == [121, 135]
    assert exact.per_resume[1]["replayed_identical"] == 15

    fresh = build_run(fault="fresh_seed")
    report = analyze_order(fresh, plan_epochs(fresh))
    assert report.per_resume[1]["replay_divergence_step"] == 121


def test_divergence_is_folded_into_the_drift_it_explains() -> None:
    report = analyze_run(build_run(fault="fresh_seed"))
    kinds = [f.kind for f in report.findings if f.severity != "info"]
    assert kinds == [RESUME_DATA_DRIFT]
    (drift,) = report.findings
    assert drift.evidence["order"]["replay_divergence_step"] == 121


def test_a_fixed_order_by_design_is_not_a_repeat() -> None:
    report = analyze_run(build_run(fault="exact", shuffle=False))
    assert [f.kind for f in report.findings] == ["resume_ok"]

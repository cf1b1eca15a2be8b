"""Data drift after a resume, for every failure mode the brief names, and none for exact resumes."""

from __future__ import annotations

import pytest

from app.analysis.drift import analyze_drift
from app.analysis.epochs import plan_epochs
from app.analysis.findings import CRITICAL, RESUME_DATA_DRIFT
from app.analysis.report import analyze_run
from tests.analysis.synth import COMPONENTS, build_run

# (fault, shuffled sampler, first affected epoch); the resume at step 120 is in epoch 2.
# A sequential sampler has the same order every epoch, so "epoch off by one" changes nothing
# there; a re-applied offset first shows in the epoch after the resume.
CASES = [
    ("fresh_seed", True, 2),
    ("fresh_seed", False, 2),
    ("position_lost", True, 2),
    ("position_lost", False, 2),
    ("offset_every_epoch", True, 3),
    ("offset_every_epoch", False, 3),
    ("skip_factor", True, 2),
    ("skip_factor", False, 2),
    ("epoch_off_by_one", True, 2),
]


@pytest.mark.parametrize(("fault", "shuffle", "first_epoch"), CASES)
def test_faulty_resume_is_drift_attributed_to_it(
    fault: str, shuffle: bool, first_epoch: int
) -> None:
    run = build_run(fault=fault, shuffle=shuffle)
    (finding,) = analyze_drift(run, plan_epochs(run))
    assert finding.kind == RESUME_DATA_DRIFT and finding.severity == CRITICAL
    assert finding.resume_from_step == 120
    assert finding.evidence["samples_never_seen"] > 0
    assert finding.evidence["affected_epochs"][0] == first_epoch


def test_epoch_off_by_one_changes_nothing_for_a_sequential_sampler() -> None:
    run = build_run(fault="epoch_off_by_one", shuffle=False)
    assert analyze_drift(run, plan_epochs(run)) == []


@pytest.mark.parametrize("shuffle", [True, False])
def test_exact_resume_shows_no_drift(shuffle: bool) -> None:
    run = build_run(fault="exact", shuffle=shuffle)
    assert analyze_drift(run, plan_epochs(run)) == []


def test_offset_reapplied_every_epoch_names_the_skipped_head() -> None:
    run = build_run(fault="offset_every_epoch", shuffle=False)
    (finding,) = analyze_drift(run, plan_epochs(run))
    k = (120 % 50) * 8  # ids of the epoch head that every later epoch skips
    assert finding.evidence["skipped_ranges"] == [[0, k - 1]]
    assert "re-applied its resume offset in every later epoch" in finding.message
    assert finding.evidence["affected_epochs"] == [3, 4, 5]


def test_position_lost_repeats_the_epoch_head_in_its_epoch_only() -> None:
    run = build_run(fault="position_lost", shuffle=False)
    (finding,) = analyze_drift(run, plan_epochs(run))
    assert finding.evidence["affected_epochs"] == [2]
    k = (120 % 50) * 8
    assert finding.evidence["repeated_ranges"] == [[0, k - 1]]
    assert finding.evidence["skipped_ranges"] == [[400 - k, 399]]


def test_repair_advice_names_the_checkpoint_and_loader_state() -> None:
    report = analyze_run(build_run(fault="fresh_seed"))
    (drift,) = [f for f in report.findings if f.kind == RESUME_DATA_DRIFT]
    repair = drift.evidence["repair"]
    assert (repair["checkpoint"], repair["epoch"], repair["position"], repair["seed"]) == (
        "step_000120",
        2,
        20 * 8,
        3,
    )
    assert repair["advice"].startswith(
        "Resume from checkpoint step_000120 with epoch 2, position 160"
    )
    verdicts = {v.step: v for v in report.checkpoints}
    assert verdicts[120].safe and not verdicts[140].safe
    assert "saved after the suspect resume from step 120" in verdicts[140].reasons[0]
    assert report.verdict == "fail"


def test_without_a_trace_the_manifests_after_a_resume_are_checked() -> None:
    run = build_run(fault="fresh_seed", restored=COMPONENTS - {"dataloader"})
    run.trace = run.replayed_trace = None
    for ckpt in run.checkpoints:
        if ckpt.step > 120:  # what a loader restarted with a new seed at epoch 0 records
            ckpt.seed = 99
            ckpt.epoch, ckpt.consumed_in_epoch = divmod((ckpt.step - 120) * 8, 400)
    report = analyze_run(run)
    (drift,) = [f for f in report.findings if f.severity != "info"]
    assert drift.kind == RESUME_DATA_DRIFT and drift.resume_from_step == 120
    manifest = drift.evidence["manifest"]
    assert manifest["checkpoint"] == "step_000140"
    assert manifest["seed"] == {"recorded": 99, "designed": 3}
    assert manifest["position"] == {"recorded": [0, 160], "designed": [2, 320]}
    assert "seed 99 instead of 3" in drift.message
    assert "did not restore the dataloader" in drift.evidence["cause"]


def test_consistent_manifests_without_a_trace_raise_nothing() -> None:
    run = build_run(fault="exact")
    run.trace = run.replayed_trace = None
    assert [f.kind for f in analyze_run(run).findings] == ["resume_ok"]

"""Scoring findings against a labelled run's ``truth.json`` (the example runs and the corpus).

A label names what a correct analyzer reports: suspect resumes with a fault kind, and the saves
after which the loss spiked. Only warning and critical findings count as claims; info findings
(a resume that checked out, an unattributed spike) are never false alarms.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

TRUTH_KINDS = {
    "data_drift": "resume_data_drift",
    "order_repeat": "resume_order_divergence",
    "incomplete_checkpoint": "incomplete_checkpoint",
    "state_not_restored": "state_not_restored",
    "lr_discontinuity": "lr_discontinuity",
}
CHECKPOINT_SPIKE = "checkpoint_loss_spike"
STEP_GAP = "step_gap"


@dataclass
class Score:
    expected: set[tuple[int, str]]
    claimed: set[tuple[int, str]]
    true_positives: set[tuple[int, str]] = field(default_factory=set)
    missed: set[tuple[int, str]] = field(default_factory=set)
    false_alarms: set[tuple[int, str]] = field(default_factory=set)

    @property
    def exact(self) -> bool:
        return not self.missed and not self.false_alarms


def expected_claims(truth: Mapping[str, Any]) -> set[tuple[int, str]]:
    out = {(int(s["at"]), TRUTH_KINDS[s["kind"]]) for s in truth.get("suspect_resumes", [])}
    out |= {(int(step), CHECKPOINT_SPIKE) for step in truth.get("checkpoint_spikes", [])}
    return out


def claims(findings: Iterable[Mapping[str, Any]]) -> set[tuple[int, str]]:
    out = set()
    for f in findings:
        if f["severity"] == "info":
            continue
        at = f.get("resume_from_step")
        if at is None:
            at = f.get("step")
        out.add((int(at) if at is not None else -1, str(f["kind"])))
    return out


def score(truth: Mapping[str, Any], findings: Iterable[Mapping[str, Any]]) -> Score:
    expected = expected_claims(truth)
    claimed = claims(findings)
    spike_saves = {step for step, kind in expected if kind == CHECKPOINT_SPIKE}
    # a stall shows as steps missing after the save as well as the spike: both are right
    countable = {c for c in claimed if not (c[1] == STEP_GAP and c[0] in spike_saves)}
    return Score(
        expected=expected,
        claimed=countable,
        true_positives=expected & countable,
        missed=expected - countable,
        false_alarms=countable - expected,
    )

"""The analyzers on the labelled torch corpus, through the real ingest and analysis services:
every labelled fault found (recall 1.0) and no warning or critical finding that is not one."""

from __future__ import annotations

from pathlib import Path

from scripts.corpus_report import evaluate


def test_every_fault_is_found_and_nothing_else_is_flagged(quick_corpus: list[Path]) -> None:
    summary = evaluate(quick_corpus[0].parent, progress=False)
    wrong = [r for r in summary["rows"] if r["missed"] or r["false_alarms"]]
    assert wrong == []
    assert summary["overall"]["recall"] == 1.0
    assert summary["overall"]["false_alarms"] == 0
    kinds = set(summary["per_kind"])
    assert kinds >= {
        "resume_data_drift",
        "resume_order_divergence",
        "incomplete_checkpoint",
        "state_not_restored",
        "lr_discontinuity",
        "checkpoint_loss_spike",
    }

"""What an alert says, and which findings a rule covers."""

from __future__ import annotations

import pytest

from app.alerts.message import (
    AlertFacts,
    compose,
    compose_test,
    slack_body,
    webhook_body,
)
from app.alerts.rules import escalates, finding_key, matches

FACTS = AlertFacts(
    run_id=7,
    project="llm",
    run_name="resumed-7b",
    kind="resume_data_drift",
    severity="critical",
    step=301,
    resume_from_step=300,
    message="Resume from step 300 re-applied its resume offset in every later epoch.",
    repair="Resume from checkpoint step_000300 with epoch 5, position 640, seed 1234.",
    alert_id=3,
    key="resume_data_drift:300",
)


def test_text_names_kind_run_step_finding_repair_and_link() -> None:
    message = compose(FACTS, "https://runwatch.example.com/")
    assert message.title == (
        "Runwatch critical: resume_data_drift in llm/resumed-7b,"
        " resume from step 300 (found at step 301)"
    )
    lines = message.text.splitlines()
    assert lines[0] == (
        "Critical finding resume_data_drift in run llm/resumed-7b (id 7),"
        " resume from step 300 (found at step 301)."
    )
    assert lines[1] == FACTS.message
    assert lines[2] == f"Repair: {FACTS.repair}"
    assert lines[3] == "Run page: https://runwatch.example.com/runs/7"
    assert message.link == "https://runwatch.example.com/runs/7"


def test_step_only_and_no_step() -> None:
    spike = AlertFacts(7, "p", "r", "loss_spike", "info", 120, None, "A spike.")
    assert "at step 120" in compose(spike, "http://h").title
    whole = AlertFacts(7, "p", "r", "incomplete_checkpoint", "warning", None, None, "Missing.")
    message = compose(whole, "http://h")
    assert message.title == "Runwatch warning: incomplete_checkpoint in p/r"
    assert "Repair" not in message.text


def test_escalation_is_worded() -> None:
    facts = AlertFacts(**{**FACTS.to_dict(), "revision": 2, "previous_severity": "warning"})
    message = compose(facts, "http://h")
    assert message.title.startswith("[escalated] Runwatch critical:")
    assert message.text.splitlines()[0] == "Escalated from warning to critical (revision 2)."
    assert webhook_body(message, 5)["alert"]["escalated"] is True


def test_facts_round_trip_through_a_stored_payload() -> None:
    stored = {**FACTS.to_dict(), "added_by_a_later_version": 1}
    assert AlertFacts.from_dict(stored) == FACTS


def test_webhook_and_slack_bodies() -> None:
    message = compose(FACTS, "http://h")
    body = webhook_body(message, 12)
    assert body["event"] == "alert" and body["delivery_id"] == 12
    assert body["alert"]["kind"] == "resume_data_drift"
    assert body["alert"]["resume_from_step"] == 300 and body["alert"]["revision"] == 1
    assert body["run"] == {
        "id": 7,
        "project": "llm",
        "name": "resumed-7b",
        "url": "http://h/runs/7",
    }
    slack = slack_body(message)
    assert slack["text"].startswith(message.title) and "http://h/runs/7" in slack["text"]
    assert slack["blocks"][0]["text"]["type"] == "mrkdwn"
    assert slack["blocks"][1]["elements"][0]["text"] == "<http://h/runs/7|Open in Runwatch>"


def test_test_message() -> None:
    message = compose_test("ops", "http://h")
    body = webhook_body(message, None)
    assert body["event"] == "test" and body["alert"] is None and body["run"] is None
    assert "ops" in message.title


@pytest.mark.parametrize(
    ("kinds", "min_severity", "kind", "severity", "expected"),
    [
        ([], "warning", "resume_data_drift", "critical", True),
        ([], "warning", "lr_discontinuity", "warning", True),
        ([], "warning", "loss_spike", "info", False),
        ([], "info", "loss_spike", "info", True),
        ([], "critical", "lr_discontinuity", "warning", False),
        (["resume_data_drift"], "info", "resume_data_drift", "critical", True),
        (["resume_data_drift"], "info", "lr_discontinuity", "critical", False),
        (["a", "b"], "warning", "b", "warning", True),
        ([], "bogus", "b", "critical", False),
    ],
)
def test_rule_matching(
    kinds: list[str], min_severity: str, kind: str, severity: str, expected: bool
) -> None:
    assert matches(kinds, min_severity, kind, severity) is expected


def test_keys_and_escalation() -> None:
    assert finding_key("resume_data_drift", 301, 300) == "resume_data_drift:300"
    assert finding_key("loss_spike", 120, None) == "loss_spike:120"
    assert finding_key("incomplete_checkpoint", None, None) == "incomplete_checkpoint:run"
    assert escalates("warning", "critical") and escalates("info", "warning")
    assert not escalates("critical", "critical") and not escalates("critical", "warning")

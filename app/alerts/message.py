"""What an alert says: the facts of one finding, and the title, text and bodies built from them.

A delivery stores its facts (``AlertFacts.to_dict``) when it is created, so every retry sends
the same words even if a later analysis rewords the finding.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

ALERT, TEST = "alert", "test"


@dataclass(frozen=True)
class AlertFacts:
    run_id: int
    project: str
    run_name: str
    kind: str
    severity: str
    step: int | None
    resume_from_step: int | None
    message: str
    repair: str | None = None
    revision: int = 1
    previous_severity: str | None = None
    alert_id: int | None = None
    key: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AlertFacts:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @property
    def escalated(self) -> bool:
        return self.revision > 1


@dataclass(frozen=True)
class Message:
    event: str  # alert or test
    title: str
    text: str
    link: str | None
    facts: AlertFacts | None = None


def run_url(base_url: str, run_id: int) -> str:
    return f"{base_url.rstrip('/')}/runs/{run_id}"


def where(facts: AlertFacts) -> str:
    """``resume from step 300 (found at step 337)``, ``at step 120`` or empty."""
    if facts.resume_from_step is not None:
        text = f"resume from step {facts.resume_from_step}"
        if facts.step is not None and facts.step != facts.resume_from_step:
            text += f" (found at step {facts.step})"
        return text
    return f"at step {facts.step}" if facts.step is not None else ""


def _one_line(text: str) -> str:
    return " ".join(text.split())


def compose(facts: AlertFacts, base_url: str) -> Message:
    link = run_url(base_url, facts.run_id)
    run = f"{facts.project}/{facts.run_name}"
    place = where(facts)
    title = f"Runwatch {facts.severity}: {facts.kind} in {run}"
    if place:
        title += f", {place}"
    lines = []
    if facts.escalated:
        title = f"[escalated] {title}"
        lines.append(
            f"Escalated from {facts.previous_severity or 'a lower severity'} to"
            f" {facts.severity} (revision {facts.revision})."
        )
    lines.append(
        f"{facts.severity.capitalize()} finding {facts.kind} in run {run} (id {facts.run_id})"
        + (f", {place}." if place else ".")
    )
    lines.append(facts.message)
    if facts.repair:
        lines.append(f"Repair: {facts.repair}")
    lines.append(f"Run page: {link}")
    return Message(ALERT, _one_line(title), "\n".join(lines), link, facts)


def compose_test(channel: str, base_url: str) -> Message:
    return Message(
        TEST,
        f"Runwatch test alert for channel {channel}",
        f"This is a test from Runwatch at {base_url}: channel {channel} can deliver alerts.",
        base_url,
    )


def webhook_body(message: Message, delivery_id: int | None) -> dict[str, Any]:
    """The generic webhook's JSON (schema in docs/alerts.md)."""
    facts = message.facts
    body: dict[str, Any] = {
        "event": message.event,
        "delivery_id": delivery_id,
        "title": message.title,
        "text": message.text,
        "url": message.link,
        "alert": None,
        "run": None,
    }
    if facts is not None:
        body["alert"] = {
            "id": facts.alert_id,
            "key": facts.key,
            "kind": facts.kind,
            "severity": facts.severity,
            "step": facts.step,
            "resume_from_step": facts.resume_from_step,
            "revision": facts.revision,
            "escalated": facts.escalated,
            "previous_severity": facts.previous_severity,
            "message": facts.message,
            "repair": facts.repair,
        }
        body["run"] = {
            "id": facts.run_id,
            "project": facts.project,
            "name": facts.run_name,
            "url": message.link,
        }
    return body


def _mrkdwn(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_body(message: Message) -> dict[str, Any]:
    """Slack-compatible incoming-webhook JSON: ``text`` for notifications, ``blocks`` to show."""
    body_lines = [line for line in message.text.splitlines() if not line.startswith("Run page:")]
    blocks: list[dict[str, Any]] = [
        {
            "type": "section",
            "text": {
                "type": "mrkdwn",
                "text": f"*{_mrkdwn(message.title)}*\n" + _mrkdwn("\n".join(body_lines)),
            },
        }
    ]
    if message.link:
        blocks.append(
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": f"<{message.link}|Open in Runwatch>"}],
            }
        )
    return {"text": f"{message.title}\n{message.text}", "blocks": blocks}

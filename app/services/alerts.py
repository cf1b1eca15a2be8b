"""Alerts on findings: which findings alert (rules per project), through which channels, one alert
per finding (re-sent only when it escalates), per-run silences, and listings.

Findings are replaced on every analysis, so an alert is identified by its run and a key made
from the finding's kind and the resume (or step) it is about. ``evaluate`` runs in the analysis
transaction and returns the ids of the deliveries it created: enqueue them after the commit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import exists, func, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from app.alerts.message import AlertFacts
from app.alerts.policy import SCHEMES
from app.alerts.rules import RANK, SEVERITIES, escalates, finding_key, matches
from app.alerts.senders import EMAIL, KINDS, DeliveryError
from app.config import Settings
from app.models import (
    Alert,
    AlertChannel,
    AlertDelivery,
    AlertRule,
    AlertSilence,
    Finding,
    Project,
    Run,
)
from app.services import alert_delivery
from app.services.alert_delivery import DELIVERY_STATES, PENDING

OPEN, RESOLVED = "open", "resolved"


class AlertError(ValueError):
    """Bad input (a 422, or exit 2 on the command line)."""


class Conflict(AlertError):
    """The name is taken (a 409)."""


# --- evaluation ---------------------------------------------------------------------------


def evaluate(*, session: Session, run_id: int, now: datetime | None = None) -> list[int]:
    """Bring the run's alerts in line with its current findings; ids of new deliveries.

    New finding matching a rule: an alert and one pending delivery per matching channel.
    Same finding again, as severe or less: the alert's text is updated, nothing is sent.
    More severe: the revision goes up and it is delivered again. A silenced run's alerts are
    stored (``silenced``) and not delivered. Alerts whose finding is gone are resolved.
    """
    now = now or datetime.now(UTC)
    run = session.get(Run, run_id)
    if run is None:
        return []
    _lock_run(session, run_id)
    rules = list(
        session.scalars(
            select(AlertRule)
            .join(AlertChannel, AlertRule.channel_id == AlertChannel.id)
            .where(
                AlertRule.project_id == run.project_id,
                AlertRule.enabled.is_(True),
                AlertChannel.enabled.is_(True),
            )
            .order_by(AlertRule.id)
        )
    )
    alerts = {a.key: a for a in session.scalars(select(Alert).where(Alert.run_id == run_id))}
    if not rules and not alerts:
        return []
    findings = strongest_per_key(
        session.scalars(
            select(Finding).where(Finding.run_id == run_id).order_by(Finding.step, Finding.id)
        )
    )
    silenced = is_silenced(session=session, run_id=run_id, now=now)
    created: list[AlertDelivery] = []
    for key, finding in findings.items():
        channels = sorted(
            {
                r.channel_id
                for r in rules
                if matches(r.kinds or [], r.min_severity, finding.kind, finding.severity)
            }
        )
        alert = alerts.get(key)
        if alert is None and not channels:
            continue
        fresh, previous = False, None
        if alert is None:
            alert, fresh = _insert_alert(session, run_id, key, finding)
        if not fresh and escalates(alert.severity, finding.severity):
            previous = alert.severity
        alert.message, alert.step, alert.resolved_at = finding.message, finding.step, None
        if previous is not None:
            alert.severity = finding.severity
            alert.revision += 1
        if not (fresh or previous is not None) or not channels:
            continue
        if silenced:
            alert.silenced = True
            continue
        session.flush()
        facts = _facts(run, alert, finding, previous)
        for channel_id in channels:
            delivery = _insert_delivery(session, alert, channel_id, facts, now)
            if delivery is not None:
                created.append(delivery)
    for key, alert in alerts.items():
        if key not in findings and alert.resolved_at is None:
            alert.resolved_at = now
    session.flush()
    return [d.id for d in created]


def strongest_per_key(findings: Iterable[Finding]) -> dict[str, Finding]:
    """One finding per alert key: the most severe (the first of equals)."""
    out: dict[str, Finding] = {}
    for finding in findings:
        key = finding_key(finding.kind, finding.step, finding.resume_from_step)
        kept = out.get(key)
        if kept is None or RANK.get(finding.severity, -1) > RANK.get(kept.severity, -1):
            out[key] = finding
    return out


def _lock_run(session: Session, run_id: int) -> None:
    """Serialize evaluations of one run: a row lock on PostgreSQL, the write lock on SQLite."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(Run.id).where(Run.id == run_id).with_for_update())
    else:
        session.execute(text("UPDATE run SET id = id WHERE id = :id"), {"id": run_id})


def _insert_alert(session: Session, run_id: int, key: str, finding: Finding) -> tuple[Alert, bool]:
    """A new alert, or the one a concurrent evaluation inserted first (then ``False``)."""
    alert = Alert(
        run_id=run_id,
        key=key,
        kind=finding.kind,
        severity=finding.severity,
        step=finding.step,
        message=finding.message,
        revision=1,
        silenced=False,
    )
    try:
        with session.begin_nested():
            session.add(alert)
            session.flush()
    except IntegrityError:
        existing = session.scalars(
            select(Alert).where(Alert.run_id == run_id, Alert.key == key)
        ).one()
        return existing, False
    return alert, True


def _insert_delivery(
    session: Session, alert: Alert, channel_id: int, facts: AlertFacts, now: datetime
) -> AlertDelivery | None:
    delivery = AlertDelivery(
        alert_id=alert.id,
        channel_id=channel_id,
        revision=alert.revision,
        state=PENDING,
        attempts=0,
        payload=facts.to_dict(),
        next_attempt_at=now,
    )
    try:
        with session.begin_nested():
            session.add(delivery)
            session.flush()
    except IntegrityError:
        return None  # a concurrent evaluation created it, and enqueues it
    return delivery


def _facts(run: Run, alert: Alert, finding: Finding, previous: str | None) -> AlertFacts:
    repair = (finding.evidence or {}).get("repair")
    return AlertFacts(
        run_id=run.id,
        project=run.project.name,
        run_name=run.name,
        kind=finding.kind,
        severity=alert.severity,
        step=finding.step,
        resume_from_step=finding.resume_from_step,
        message=finding.message,
        repair=repair.get("advice") if isinstance(repair, dict) else None,
        revision=alert.revision,
        previous_severity=previous,
        alert_id=alert.id,
        key=alert.key,
    )


# --- silences -----------------------------------------------------------------------------


def is_silenced(*, session: Session, run_id: int, now: datetime | None = None) -> bool:
    silence = session.get(AlertSilence, run_id)
    now = now or datetime.now(UTC)
    return silence is not None and (silence.until is None or silence.until > now)


def silence_run(
    *,
    session: Session,
    run_id: int,
    minutes: int | None,
    reason: str | None = None,
    now: datetime | None = None,
) -> AlertSilence:
    """No deliveries for the run's alerts for ``minutes`` (None: until unsilenced)."""
    if minutes is not None and minutes <= 0:
        raise AlertError("minutes must be positive (or null for no end)")
    now = now or datetime.now(UTC)
    until = None if minutes is None else now + timedelta(minutes=minutes)
    silence = session.get(AlertSilence, run_id)
    if silence is None:
        silence = AlertSilence(run_id=run_id)
        session.add(silence)
    silence.until, silence.reason, silence.created_at = until, reason, now
    session.flush()
    return silence


def unsilence_run(*, session: Session, run_id: int) -> bool:
    silence = session.get(AlertSilence, run_id)
    if silence is None:
        return False
    session.delete(silence)
    session.flush()
    return True


# --- channels -----------------------------------------------------------------------------


def get_channel(*, session: Session, channel_id: int) -> AlertChannel | None:
    return session.get(AlertChannel, channel_id)


def channel_by_name(*, session: Session, name: str) -> AlertChannel | None:
    return session.scalars(select(AlertChannel).where(AlertChannel.name == name)).one_or_none()


def list_channels(*, session: Session) -> list[AlertChannel]:
    return list(session.scalars(select(AlertChannel).order_by(AlertChannel.name)))


def create_channel(
    *,
    session: Session,
    name: str,
    kind: str,
    url: str | None = None,
    recipients: list[str] | None = None,
    secret: str | None = None,
    enabled: bool = True,
) -> AlertChannel:
    if channel_by_name(session=session, name=name) is not None:
        raise Conflict(f"a channel named {name!r} exists")
    channel = AlertChannel(
        name=name,
        kind=kind,
        url=url,
        recipients=list(recipients) if recipients else None,
        secret=secret or None,
        enabled=enabled,
    )
    _validate_channel(channel)
    session.add(channel)
    session.flush()
    return channel


UNSET: Any = object()


def update_channel(
    *,
    session: Session,
    channel: AlertChannel,
    name: str | None = None,
    url: str | None = UNSET,
    recipients: list[str] | None = UNSET,
    secret: str | None = UNSET,
    enabled: bool | None = None,
) -> AlertChannel:
    """Change what is given; ``secret=""`` or None removes the secret."""
    if name is not None and name != channel.name:
        if channel_by_name(session=session, name=name) is not None:
            raise Conflict(f"a channel named {name!r} exists")
        channel.name = name
    if url is not UNSET:
        channel.url = url
    if recipients is not UNSET:
        channel.recipients = list(recipients) if recipients else None
    if secret is not UNSET:
        channel.secret = secret or None
    if enabled is not None:
        channel.enabled = enabled
    _validate_channel(channel)
    session.flush()
    return channel


def delete_channel(*, session: Session, channel: AlertChannel) -> None:
    """Its rules and deliveries go with it."""
    session.delete(channel)
    session.flush()


def _validate_channel(channel: AlertChannel) -> None:
    if not channel.name or len(channel.name) > 200:
        raise AlertError("a channel needs a name of at most 200 characters")
    if channel.kind not in KINDS:
        raise AlertError(f"kind must be one of {', '.join(KINDS)}, not {channel.kind!r}")
    if channel.kind == EMAIL:
        if not channel.recipients or not all(
            isinstance(r, str) and "@" in r and "\n" not in r for r in channel.recipients
        ):
            raise AlertError("an email channel needs recipients (addresses with '@')")
        channel.url = None
        return
    url = (channel.url or "").strip()
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in SCHEMES:
        raise AlertError(f"a {channel.kind} channel needs an http:// or https:// URL")
    channel.url = url


# --- rules --------------------------------------------------------------------------------


def create_rule(
    *,
    session: Session,
    project: str,
    channel: AlertChannel,
    kinds: list[str] | None = None,
    min_severity: str = "warning",
) -> AlertRule:
    if min_severity not in RANK:
        raise AlertError(f"min_severity must be one of {', '.join(SEVERITIES)}")
    found = session.scalars(select(Project).where(Project.name == project)).one_or_none()
    if found is None:
        found = Project(name=project)
        session.add(found)
        session.flush()
    rule = AlertRule(
        project_id=found.id,
        channel_id=channel.id,
        kinds=sorted(set(kinds or [])),
        min_severity=min_severity,
        enabled=True,
    )
    session.add(rule)
    session.flush()
    return rule


def list_rules(*, session: Session, project: str | None = None) -> list[tuple[AlertRule, str]]:
    query = (
        select(AlertRule, Project.name)
        .join(Project, AlertRule.project_id == Project.id)
        .options(selectinload(AlertRule.channel))
        .order_by(AlertRule.id)
    )
    if project is not None:
        query = query.where(Project.name == project)
    return [(rule, name) for rule, name in session.execute(query).all()]


def get_rule(*, session: Session, rule_id: int) -> tuple[AlertRule, str] | None:
    row = session.execute(
        select(AlertRule, Project.name)
        .join(Project, AlertRule.project_id == Project.id)
        .where(AlertRule.id == rule_id)
        .options(selectinload(AlertRule.channel))
    ).one_or_none()
    return None if row is None else (row[0], row[1])


def delete_rule(*, session: Session, rule: AlertRule) -> None:
    session.delete(rule)
    session.flush()


# --- listing ------------------------------------------------------------------------------


@dataclass
class AlertFilter:
    project: str | None = None
    run_id: int | None = None
    state: str | None = None  # open, resolved, or a delivery state: pending, sending, sent, failed
    severity: str | None = None
    limit: int = 50
    offset: int = 0


@dataclass(frozen=True)
class AlertRow:
    alert: Alert
    project: str
    run_name: str


ALERT_STATES = (OPEN, RESOLVED, *DELIVERY_STATES)


def list_alerts(*, session: Session, filters: AlertFilter) -> tuple[list[AlertRow], int]:
    """Alerts, most recently changed first, and the total matching count."""
    query = (
        select(Alert, Project.name, Run.name)
        .join(Run, Alert.run_id == Run.id)
        .join(Project, Run.project_id == Project.id)
    )
    if filters.project is not None:
        query = query.where(Project.name == filters.project)
    if filters.run_id is not None:
        query = query.where(Alert.run_id == filters.run_id)
    if filters.severity is not None:
        query = query.where(Alert.severity == filters.severity)
    if filters.state == OPEN:
        query = query.where(Alert.resolved_at.is_(None))
    elif filters.state == RESOLVED:
        query = query.where(Alert.resolved_at.is_not(None))
    elif filters.state is not None:
        query = query.where(
            exists().where(AlertDelivery.alert_id == Alert.id, AlertDelivery.state == filters.state)
        )
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    rows = session.execute(
        query.order_by(Alert.updated_at.desc(), Alert.id.desc())
        .limit(filters.limit)
        .offset(filters.offset)
    ).all()
    return [AlertRow(a, p, r) for a, p, r in rows], int(total)


def get_alert(*, session: Session, alert_id: int) -> AlertRow | None:
    row = session.execute(
        select(Alert, Project.name, Run.name)
        .join(Run, Alert.run_id == Run.id)
        .join(Project, Run.project_id == Project.id)
        .where(Alert.id == alert_id)
        .options(selectinload(Alert.deliveries).selectinload(AlertDelivery.channel))
    ).one_or_none()
    return None if row is None else AlertRow(row[0], row[1], row[2])


# --- testing a channel --------------------------------------------------------------------


def send_test(*, channel: AlertChannel, settings: Settings) -> str | None:
    """Send a test message now; the error when it did not get through, else None."""
    try:
        alert_delivery.send_test(channel=channel, settings=settings)
    except DeliveryError as exc:
        return str(exc)
    return None

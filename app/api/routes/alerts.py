"""Alerts, their channels and rules, and per-run silences.

Channels are admin-only (their URLs and secrets reach outside); rules need write on their
project; silences write on the run's project. Secrets are never returned and webhook URLs are
shown as scheme and host only.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Query, Response
from pydantic import BaseModel, Field, model_validator

from app.alerts.message import run_url
from app.alerts.policy import redact
from app.api.auth import Reader, Writer, authorize, project_filter
from app.api.deps import SessionDep, SettingsDep
from app.api.lookups import get_run_or_404
from app.models import AlertChannel, AlertRule
from app.services import alerts as alert_service

router = APIRouter(tags=["alerts"])

Severity = Literal["info", "warning", "critical"]
Name = Annotated[str, Field(min_length=1, max_length=200)]
STATE_PATTERN = "^(" + "|".join(alert_service.ALERT_STATES) + ")$"


class ChannelIn(BaseModel):
    name: Name
    kind: Literal["webhook", "slack", "email"]
    url: Annotated[str | None, Field(max_length=2000)] = None
    recipients: Annotated[list[Annotated[str, Field(max_length=320)]], Field(max_length=100)] = []
    secret: Annotated[str | None, Field(max_length=500, description="HMAC key (webhook)")] = None
    enabled: bool = True


class ChannelPatch(BaseModel):
    name: Name | None = None
    url: Annotated[str | None, Field(max_length=2000)] = None
    recipients: (
        Annotated[list[Annotated[str, Field(max_length=320)]], Field(max_length=100)] | None
    ) = None
    secret: Annotated[str | None, Field(max_length=500, description="null or '' removes")] = None
    enabled: bool | None = None


class ChannelOut(BaseModel):
    id: int
    name: str
    kind: str
    target: str | None = Field(description="Scheme and host of the URL; the rest is secret")
    recipients: list[str]
    has_secret: bool
    enabled: bool
    created_at: datetime


class TestResult(BaseModel):
    ok: bool
    error: str | None


class RuleIn(BaseModel):
    project: Name
    channel_id: int | None = None
    channel: Name | None = Field(default=None, description="The channel's name, or channel_id")
    kinds: Annotated[list[Annotated[str, Field(max_length=60)]], Field(max_length=50)] = []
    min_severity: Severity = "warning"

    @model_validator(mode="after")
    def _one_channel(self) -> RuleIn:
        if (self.channel_id is None) == (self.channel is None):
            raise ValueError("give channel_id or channel (its name)")
        return self


class RuleOut(BaseModel):
    id: int
    project: str
    channel_id: int
    channel: str
    kinds: list[str] = Field(description="Finding kinds; empty means every kind")
    min_severity: str
    enabled: bool
    created_at: datetime


class DeliveryOut(BaseModel):
    id: int
    channel_id: int
    channel: str
    revision: int
    state: str = Field(description="pending, sending, sent or failed")
    attempts: int
    last_error: str | None
    sent_at: datetime | None
    created_at: datetime


class AlertOut(BaseModel):
    id: int
    run_id: int
    project: str
    run_name: str
    key: str
    kind: str
    severity: str
    step: int | None
    message: str
    revision: int
    silenced: bool
    resolved_at: datetime | None
    created_at: datetime
    updated_at: datetime
    url: str


class AlertDetail(AlertOut):
    deliveries: list[DeliveryOut]


class AlertPage(BaseModel):
    items: list[AlertOut]
    total: int
    limit: int
    offset: int


class SilenceIn(BaseModel):
    minutes: Annotated[int | None, Field(ge=1, le=10 * 365 * 24 * 60)] = Field(
        default=None, description="How long; null silences until DELETE"
    )
    reason: Annotated[str | None, Field(max_length=1000)] = None


class SilenceOut(BaseModel):
    run_id: int
    until: datetime | None
    reason: str | None
    created_at: datetime


def _channel_out(channel: AlertChannel) -> ChannelOut:
    return ChannelOut(
        id=channel.id,
        name=channel.name,
        kind=channel.kind,
        target=redact(channel.url) or None,
        recipients=list(channel.recipients or []),
        has_secret=bool(channel.secret),
        enabled=channel.enabled,
        created_at=channel.created_at,
    )


def _rule_out(rule: AlertRule, project: str) -> RuleOut:
    return RuleOut(
        id=rule.id,
        project=project,
        channel_id=rule.channel_id,
        channel=rule.channel.name,
        kinds=list(rule.kinds or []),
        min_severity=rule.min_severity,
        enabled=rule.enabled,
        created_at=rule.created_at,
    )


def _alert_out(row: alert_service.AlertRow, base_url: str) -> AlertOut:
    a = row.alert
    return AlertOut(
        id=a.id,
        run_id=a.run_id,
        project=row.project,
        run_name=row.run_name,
        key=a.key,
        kind=a.kind,
        severity=a.severity,
        step=a.step,
        message=a.message,
        revision=a.revision,
        silenced=a.silenced,
        resolved_at=a.resolved_at,
        created_at=a.created_at,
        updated_at=a.updated_at,
        url=run_url(base_url, a.run_id),
    )


def _channel(session: SessionDep, channel_id: int) -> AlertChannel:
    channel = alert_service.get_channel(session=session, channel_id=channel_id)
    if channel is None:
        raise HTTPException(404, f"alert channel {channel_id} not found")
    return channel


def _service_error(exc: alert_service.AlertError) -> HTTPException:
    return HTTPException(409 if isinstance(exc, alert_service.Conflict) else 422, str(exc))


# --- channels (admin) -----------------------------------------------------------------


@router.get("/api/v1/alerts/channels", response_model=list[ChannelOut])
def list_channels(session: SessionDep, principal: Reader) -> list[ChannelOut]:
    authorize(principal, "admin", None)
    return [_channel_out(c) for c in alert_service.list_channels(session=session)]


@router.post("/api/v1/alerts/channels", response_model=ChannelOut, status_code=201)
def create_channel(body: ChannelIn, session: SessionDep, principal: Writer) -> ChannelOut:
    authorize(principal, "admin", None)
    try:
        channel = alert_service.create_channel(session=session, **body.model_dump())
    except alert_service.AlertError as exc:
        raise _service_error(exc) from None
    session.commit()
    return _channel_out(channel)


@router.patch("/api/v1/alerts/channels/{channel_id}", response_model=ChannelOut)
def update_channel(
    channel_id: int, body: ChannelPatch, session: SessionDep, principal: Writer
) -> ChannelOut:
    """Change the fields given; ``secret: null`` (or ``""``) removes the secret."""
    authorize(principal, "admin", None)
    channel = _channel(session, channel_id)
    changes = body.model_dump(include=body.model_fields_set)
    if changes.get("name", "") is None:
        raise HTTPException(422, "name cannot be null")
    try:
        alert_service.update_channel(session=session, channel=channel, **changes)
    except alert_service.AlertError as exc:
        raise _service_error(exc) from None
    session.commit()
    return _channel_out(channel)


@router.delete("/api/v1/alerts/channels/{channel_id}", status_code=204)
def delete_channel(channel_id: int, session: SessionDep, principal: Writer) -> Response:
    """The channel, its rules and its deliveries."""
    authorize(principal, "admin", None)
    alert_service.delete_channel(session=session, channel=_channel(session, channel_id))
    session.commit()
    return Response(status_code=204)


@router.post("/api/v1/alerts/channels/{channel_id}/test", response_model=TestResult)
def test_channel(
    channel_id: int, session: SessionDep, settings: SettingsDep, principal: Writer
) -> TestResult:
    """Send a test message now and say whether it got through (and why not)."""
    authorize(principal, "admin", None)
    channel = _channel(session, channel_id)
    error = alert_service.send_test(channel=channel, settings=settings)
    return TestResult(ok=error is None, error=error)


# --- rules (write on the project) -------------------------------------------------------


@router.get("/api/v1/alerts/rules", response_model=list[RuleOut])
def list_rules(session: SessionDep, principal: Reader, project: str | None = None) -> list[RuleOut]:
    if project is not None:
        authorize(principal, "read", project)
    rows = alert_service.list_rules(session=session, project=project or project_filter(principal))
    return [_rule_out(rule, name) for rule, name in rows]


@router.post("/api/v1/alerts/rules", response_model=RuleOut, status_code=201)
def create_rule(body: RuleIn, session: SessionDep, principal: Writer) -> RuleOut:
    """Findings of ``project`` of a kind in ``kinds`` (every kind when empty) and at least
    ``min_severity`` alert through the channel."""
    authorize(principal, "write", body.project)
    if body.channel_id is not None:
        channel = alert_service.get_channel(session=session, channel_id=body.channel_id)
    else:
        channel = alert_service.channel_by_name(session=session, name=body.channel or "")
    if channel is None:
        raise HTTPException(422, f"no alert channel {body.channel_id or body.channel!r}")
    try:
        rule = alert_service.create_rule(
            session=session,
            project=body.project,
            channel=channel,
            kinds=body.kinds,
            min_severity=body.min_severity,
        )
    except alert_service.AlertError as exc:
        raise _service_error(exc) from None
    session.commit()
    return _rule_out(rule, body.project)


@router.delete("/api/v1/alerts/rules/{rule_id}", status_code=204)
def delete_rule(rule_id: int, session: SessionDep, principal: Writer) -> Response:
    found = alert_service.get_rule(session=session, rule_id=rule_id)
    if found is None:
        raise HTTPException(404, f"alert rule {rule_id} not found")
    rule, project = found
    authorize(principal, "write", project)
    alert_service.delete_rule(session=session, rule=rule)
    session.commit()
    return Response(status_code=204)


# --- alerts (read) ----------------------------------------------------------------------


@router.get("/api/v1/alerts", response_model=AlertPage)
def list_alerts(
    session: SessionDep,
    settings: SettingsDep,
    principal: Reader,
    project: str | None = None,
    run_id: int | None = None,
    state: Annotated[
        str | None,
        Query(pattern=STATE_PATTERN, description="open, resolved, or a delivery state"),
    ] = None,
    severity: Annotated[Severity | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> AlertPage:
    """Alerts, most recently changed first. ``state=pending|sending|sent|failed`` keeps alerts
    with a delivery in that state."""
    if project is not None:
        authorize(principal, "read", project)
    filters = alert_service.AlertFilter(
        project=project or project_filter(principal),
        run_id=run_id,
        state=state,
        severity=severity,
        limit=limit,
        offset=offset,
    )
    rows, total = alert_service.list_alerts(session=session, filters=filters)
    return AlertPage(
        items=[_alert_out(r, settings.base_url) for r in rows],
        total=total,
        limit=limit,
        offset=offset,
    )


@router.get("/api/v1/alerts/{alert_id}", response_model=AlertDetail)
def get_alert(
    alert_id: int, session: SessionDep, settings: SettingsDep, principal: Reader
) -> AlertDetail:
    row = alert_service.get_alert(session=session, alert_id=alert_id)
    if row is None:
        raise HTTPException(404, f"alert {alert_id} not found")
    authorize(principal, "read", row.project)
    deliveries = [
        DeliveryOut(
            id=d.id,
            channel_id=d.channel_id,
            channel=d.channel.name,
            revision=d.revision,
            state=d.state,
            attempts=d.attempts,
            last_error=d.last_error,
            sent_at=d.sent_at,
            created_at=d.created_at,
        )
        for d in sorted(row.alert.deliveries, key=lambda d: d.id)
    ]
    return AlertDetail(**_alert_out(row, settings.base_url).model_dump(), deliveries=deliveries)


# --- silences (write on the run's project) ----------------------------------------------


@router.put("/api/v1/runs/{run_id}/silence", response_model=SilenceOut)
def silence_run(run_id: int, body: SilenceIn, session: SessionDep, principal: Writer) -> SilenceOut:
    """No alert deliveries for this run for ``minutes`` (until DELETE when null)."""
    run = get_run_or_404(session, run_id)
    authorize(principal, "write", run.project.name)
    silence = alert_service.silence_run(
        session=session, run_id=run_id, minutes=body.minutes, reason=body.reason
    )
    session.commit()
    return SilenceOut(
        run_id=run_id, until=silence.until, reason=silence.reason, created_at=silence.created_at
    )


@router.delete("/api/v1/runs/{run_id}/silence", status_code=204)
def unsilence_run(run_id: int, session: SessionDep, principal: Writer) -> Response:
    run = get_run_or_404(session, run_id)
    authorize(principal, "write", run.project.name)
    alert_service.unsilence_run(session=session, run_id=run_id)
    session.commit()
    return Response(status_code=204)

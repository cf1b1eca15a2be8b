"""Alerts: what was raised on which run, and whether each channel got it; the channels, each
with a button that sends a test message."""

from __future__ import annotations

from typing import Any

import dash
import flask
from dash import ALL, Input, Output, State, callback, ctx, dcc, html
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from app.api.auth import COOKIE
from app.config import get_settings
from app.models import Alert, AlertDelivery
from app.services import alerts as alert_service
from app.services.tokens import RANK, authenticate
from frontend.components import fmt_step, severity_badge, table
from frontend.data import reading, visible_project

dash.register_page(__name__, path="/alerts", title="Runwatch - alerts", name="Alerts")

PAGE_SIZE = 100
STATE_FILTERS = ["open", "resolved", "pending", "sending", "sent", "failed"]


def layout(**_: Any) -> html.Div:
    return html.Div(
        [
            html.H1("Alerts"),
            html.Div(
                [
                    dcc.Dropdown(id="alerts-state", options=STATE_FILTERS, placeholder="Any state"),
                    dcc.Dropdown(
                        id="alerts-severity",
                        options=["critical", "warning", "info"],
                        placeholder="Any severity",
                    ),
                ],
                className="filters",
            ),
            html.Div(id="alerts-table"),
            html.H2("Channels"),
            html.Div(channels_table()),
            html.Div(id="alerts-test-result", role="status"),
        ]
    )


@callback(
    Output("alerts-table", "children"),
    Input("alerts-state", "value"),
    Input("alerts-severity", "value"),
)
def alerts_table(state: str | None, severity: str | None) -> Any:
    filters = alert_service.AlertFilter(
        project=visible_project(), state=state, severity=severity, limit=PAGE_SIZE
    )
    with reading() as session:
        rows, total = alert_service.list_alerts(session=session, filters=filters)
        ids = [row.alert.id for row in rows]
        deliveries = _deliveries(session, ids)
        body = [_alert_row(row, deliveries.get(row.alert.id, [])) for row in rows]
    if not body:
        return html.P(
            "No alerts. Alerts are raised by rules: `runwatch alerts rule add --project P"
            " --channel NAME`.",
            className="muted",
        )
    shown = f"{len(body)} of {total:,}" if total > len(body) else f"{total:,}"
    return html.Div(
        [
            html.P(f"{shown} alert(s), most recent first", className="muted"),
            table(
                ["Updated", "Run", "Finding", "Step", "What happened", "Deliveries"],
                body,
                class_name="grid alerts",
            ),
        ]
    )


def _deliveries(session: Session, alert_ids: list[int]) -> dict[int, list[AlertDelivery]]:
    found: dict[int, list[AlertDelivery]] = {}
    if alert_ids:
        query = (
            select(AlertDelivery)
            .where(AlertDelivery.alert_id.in_(alert_ids))
            .options(selectinload(AlertDelivery.channel))
            .order_by(AlertDelivery.id)
        )
        for delivery in session.scalars(query):
            found.setdefault(delivery.alert_id, []).append(delivery)
    return found


def _alert_row(row: alert_service.AlertRow, deliveries: list[AlertDelivery]) -> list[Any]:
    alert: Alert = row.alert
    finding: list[Any] = [severity_badge(alert.severity), " ", alert.kind]
    if alert.revision > 1:
        finding.append(html.Span(f" escalated (rev {alert.revision})", className="muted"))
    if alert.resolved_at is not None:
        finding.append(html.Span(" resolved", className="muted"))
    if alert.silenced:
        finding.append(html.Span(" silenced", className="muted"))
    return [
        alert.updated_at.strftime("%Y-%m-%d %H:%M:%S"),
        dcc.Link(f"{row.project}/{row.run_name}", href=f"/runs/{alert.run_id}"),
        html.Span(finding),
        fmt_step(alert.step),
        alert.message,
        html.Ul([_delivery_item(d) for d in deliveries], className="deliveries")
        if deliveries
        else html.Span("none", className="muted"),
    ]


def _delivery_item(delivery: AlertDelivery) -> html.Li:
    text = f"{delivery.channel.name}: {delivery.state}"
    if delivery.attempts:
        text += f" after {delivery.attempts} attempt(s)"
    parts: list[Any] = [html.Span(text, className=f"delivery-{delivery.state}")]
    if delivery.last_error:
        parts.append(html.Div(delivery.last_error, className="muted"))
    return html.Li(parts)


def channels_table() -> Any:
    with reading() as session:
        channels = alert_service.list_channels(session=session)
        rows = [
            [
                c.name,
                c.kind,
                "enabled" if c.enabled else "disabled",
                html.Button(
                    "Send test",
                    id={"type": "alerts-test", "channel": c.id},
                    n_clicks=0,
                    className="button",
                ),
            ]
            for c in channels
        ]
    if not rows:
        return html.P(
            "No channels: `runwatch alerts channel add NAME --kind webhook --url URL`.",
            className="muted",
        )
    return table(["Channel", "Kind", "State", ""], rows)


@callback(
    Output("alerts-test-result", "children"),
    Input({"type": "alerts-test", "channel": ALL}, "n_clicks"),
    State({"type": "alerts-test", "channel": ALL}, "id"),
    prevent_initial_call=True,
)
def send_test(clicks: list[int], ids: list[dict[str, int]]) -> Any:
    """A test message through one channel, now; channels are admin resources."""
    trigger = ctx.triggered_id
    if not isinstance(trigger, dict) or not any(clicks):
        return dash.no_update
    with reading() as session:
        token = authenticate(session=session, secret=flask.request.cookies.get(COOKIE, ""))
        if token is None or RANK[token.scope] < RANK["admin"]:
            return html.P("Sending a test needs an admin token.", className="error")
        channel = alert_service.get_channel(session=session, channel_id=int(trigger["channel"]))
        if channel is None:
            return html.P("That channel no longer exists.", className="error")
        error = alert_service.send_test(channel=channel, settings=get_settings())
        name = channel.name
    if error:
        return html.P(f"Test through {name} failed: {error}", className="error")
    return html.P(f"Test message sent through {name}.", className="ok")

"""``runwatch alerts``: channels, rules, the test message, alerts and per-run silences.

Talks to the database directly, like the other commands. Secrets are never printed and webhook
URLs are shown as scheme and host only.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Annotated, Any, NoReturn

import typer

alerts_cli = typer.Typer(
    help="Alerts on findings: channels, rules, silences, and what was sent.", no_args_is_help=True
)
channel_cli = typer.Typer(help="Where alerts go: webhook, slack or email.", no_args_is_help=True)
rule_cli = typer.Typer(
    help="Which findings of a project alert, through which channel.", no_args_is_help=True
)
alerts_cli.add_typer(channel_cli, name="channel")
alerts_cli.add_typer(rule_cli, name="rule")

DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)\s*$")
UNIT_MINUTES = {"s": 1 / 60, "m": 1, "h": 60, "d": 24 * 60}


def parse_duration(text: str) -> int | None:
    """Minutes in ``30m``, ``2h``, ``1d`` or ``90s`` (rounded up); None for ``forever``."""
    if text.strip().lower() in ("forever", "never", "inf"):
        return None
    match = DURATION.match(text.lower())
    if match is None:
        raise ValueError(f"not a duration: {text!r} (use e.g. 30m, 2h, 1d or forever)")
    minutes = math.ceil(float(match.group(1)) * UNIT_MINUTES[match.group(2)])
    if minutes <= 0:
        raise ValueError("the duration must be positive")
    return minutes


def _fail(message: str, code: int = 2) -> NoReturn:
    typer.secho(message, err=True, fg=typer.colors.RED)
    raise typer.Exit(code)


def _prepare() -> None:
    from app.cli import _prepare_database
    from app.config import get_settings

    _prepare_database(get_settings())


def _channel_row(channel: Any) -> dict[str, Any]:
    from app.alerts.policy import redact

    return {
        "id": channel.id,
        "name": channel.name,
        "kind": channel.kind,
        "target": redact(channel.url) or None,
        "recipients": list(channel.recipients or []),
        "has_secret": bool(channel.secret),
        "enabled": channel.enabled,
    }


@channel_cli.command("add")
def channel_add(
    name: Annotated[str, typer.Argument(help="A unique name, e.g. oncall")],
    kind: Annotated[str, typer.Option(help="webhook, slack or email")],
    url: Annotated[str | None, typer.Option(help="webhook / slack: the URL to POST to")] = None,
    to: Annotated[
        list[str] | None, typer.Option("--to", help="email: a recipient (repeat for more)")
    ] = None,
    secret: Annotated[
        str | None, typer.Option(help="webhook: HMAC key for X-Runwatch-Signature")
    ] = None,
    secret_env: Annotated[
        str | None, typer.Option(help="webhook: read the HMAC key from this variable")
    ] = None,
) -> None:
    """Add a channel alerts can be sent through."""
    from app.db import get_engine, session_scope
    from app.services import alerts as alert_service

    if secret is not None and secret_env is not None:
        _fail("give --secret or --secret-env, not both")
    if secret_env is not None:
        secret = os.environ.get(secret_env)
        if not secret:
            _fail(f"the variable {secret_env} is not set")
    _prepare()
    try:
        with session_scope(get_engine()) as session:
            channel = alert_service.create_channel(
                session=session, name=name, kind=kind, url=url, recipients=to, secret=secret
            )
            row = _channel_row(channel)
    except alert_service.AlertError as exc:
        _fail(str(exc))
    where = row["target"] or ", ".join(row["recipients"])
    typer.echo(f"added channel {name} ({kind} {where})")


@channel_cli.command("list")
def channel_list(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False,
) -> None:
    """Channels (never their secrets; URLs as scheme and host)."""
    from app.db import get_engine, session_scope
    from app.services import alerts as alert_service

    _prepare()
    with session_scope(get_engine()) as session:
        rows = [_channel_row(c) for c in alert_service.list_channels(session=session)]
    if as_json:
        typer.echo(json.dumps(rows))
        return
    for row in rows:
        where = row["target"] or ", ".join(row["recipients"])
        flags = " signed" if row["has_secret"] else ""
        flags += "" if row["enabled"] else " (disabled)"
        typer.echo(f"{row['name']:24s} {row['kind']:8s} {where}{flags}")


@channel_cli.command("rm")
def channel_rm(name: Annotated[str, typer.Argument()]) -> None:
    """Remove a channel with its rules and deliveries."""
    from app.db import get_engine, session_scope
    from app.services import alerts as alert_service

    _prepare()
    with session_scope(get_engine()) as session:
        channel = alert_service.channel_by_name(session=session, name=name)
        if channel is None:
            _fail(f"no channel named {name!r}")
        alert_service.delete_channel(session=session, channel=channel)
    typer.echo(f"removed channel {name}")


@rule_cli.command("add")
def rule_add(
    project: Annotated[str, typer.Option(help="The project whose findings alert")],
    channel: Annotated[str, typer.Option(help="The channel's name")],
    kind: Annotated[
        list[str] | None, typer.Option("--kind", help="A finding kind (repeat; default: all)")
    ] = None,
    min_severity: Annotated[
        str, typer.Option(help="info, warning or critical: the least severe that alerts")
    ] = "warning",
) -> None:
    """Alert on PROJECT's findings of --kind (every kind by default) and at least
    --min-severity, through --channel."""
    from app.db import get_engine, session_scope
    from app.services import alerts as alert_service

    _prepare()
    try:
        with session_scope(get_engine()) as session:
            found = alert_service.channel_by_name(session=session, name=channel)
            if found is None:
                _fail(f"no channel named {channel!r}")
            rule = alert_service.create_rule(
                session=session,
                project=project,
                channel=found,
                kinds=kind,
                min_severity=min_severity,
            )
            rule_id = rule.id
    except alert_service.AlertError as exc:
        _fail(str(exc))
    kinds = ", ".join(sorted(set(kind or []))) or "every kind"
    typer.echo(f"added rule {rule_id}: {project} {kinds} at {min_severity} or worse → {channel}")


@rule_cli.command("list")
def rule_list(
    project: Annotated[str | None, typer.Option(help="Only this project's rules")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False,
) -> None:
    """Rules: project, kinds, least severity, channel."""
    from app.db import get_engine, session_scope
    from app.services import alerts as alert_service

    _prepare()
    with session_scope(get_engine()) as session:
        rows: list[dict[str, Any]] = [
            {
                "id": rule.id,
                "project": name,
                "channel": rule.channel.name,
                "kinds": list(rule.kinds or []),
                "min_severity": rule.min_severity,
                "enabled": rule.enabled,
            }
            for rule, name in alert_service.list_rules(session=session, project=project)
        ]
    if as_json:
        typer.echo(json.dumps(rows))
        return
    for row in rows:
        kinds = ", ".join(row["kinds"]) or "every kind"
        typer.echo(
            f"{row['id']:>4}  {row['project']:20s} {row['min_severity']:8s} {kinds}"
            f" → {row['channel']}"
        )


@rule_cli.command("rm")
def rule_rm(rule_id: Annotated[int, typer.Argument(metavar="ID")]) -> None:
    """Remove a rule."""
    from app.db import get_engine, session_scope
    from app.services import alerts as alert_service

    _prepare()
    with session_scope(get_engine()) as session:
        found = alert_service.get_rule(session=session, rule_id=rule_id)
        if found is None:
            _fail(f"no rule {rule_id}")
        alert_service.delete_rule(session=session, rule=found[0])
    typer.echo(f"removed rule {rule_id}")


@alerts_cli.command("test")
def test(channel: Annotated[str, typer.Argument(help="The channel's name")]) -> None:
    """Send a test message through CHANNEL now; exit 1 (saying why) when it does not arrive."""
    from app.config import get_settings
    from app.db import get_engine, session_scope
    from app.services import alerts as alert_service

    _prepare()
    with session_scope(get_engine()) as session:
        found = alert_service.channel_by_name(session=session, name=channel)
        if found is None:
            _fail(f"no channel named {channel!r}")
        error = alert_service.send_test(channel=found, settings=get_settings())
    if error is not None:
        _fail(f"test alert through {channel} failed: {error}", code=1)
    typer.echo(f"test alert sent through {channel}")


@alerts_cli.command("list")
def list_(
    project: Annotated[str | None, typer.Option(help="Only this project")] = None,
    run: Annotated[str | None, typer.Option(help="Only this run (id or project/name)")] = None,
    limit: Annotated[int, typer.Option(help="At most this many")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False,
) -> None:
    """Alerts, most recent first, with how their deliveries went."""
    from app.db import get_engine, session_scope
    from app.services import alerts as alert_service
    from app.services.runs import RunNotFound, find_run

    _prepare()
    with session_scope(get_engine()) as session:
        run_id = None
        if run is not None:
            try:
                run_id = find_run(session=session, ref=run).id
            except RunNotFound as exc:
                _fail(str(exc))
        filters = alert_service.AlertFilter(project=project, run_id=run_id, limit=limit)
        found, _ = alert_service.list_alerts(session=session, filters=filters)
        rows = [_alert_row(session, r) for r in found]
    if as_json:
        typer.echo(json.dumps(rows))
        return
    for row in rows:
        where = f"step {row['step']}" if row["step"] is not None else "run"
        state = "resolved" if row["resolved_at"] else ("silenced" if row["silenced"] else "open")
        sent = ", ".join(f"{d['channel']} {d['state']}" for d in row["deliveries"]) or "-"
        typer.echo(
            f"{row['id']:>5} {row['project']}/{row['run_name']} {row['severity']:8s}"
            f" {row['kind']:24s} {where:>10s} r{row['revision']} {state:8s} {sent}"
        )


def _alert_row(session: Any, row: Any) -> dict[str, Any]:
    from app.services import alerts as alert_service

    detail = alert_service.get_alert(session=session, alert_id=row.alert.id)
    alert = row.alert
    return {
        "id": alert.id,
        "run_id": alert.run_id,
        "project": row.project,
        "run_name": row.run_name,
        "key": alert.key,
        "kind": alert.kind,
        "severity": alert.severity,
        "step": alert.step,
        "revision": alert.revision,
        "silenced": alert.silenced,
        "message": alert.message,
        "resolved_at": str(alert.resolved_at) if alert.resolved_at else None,
        "deliveries": [
            {
                "channel": d.channel.name,
                "revision": d.revision,
                "state": d.state,
                "attempts": d.attempts,
                "last_error": d.last_error,
                "sent_at": str(d.sent_at) if d.sent_at else None,
            }
            for d in sorted(detail.alert.deliveries if detail else [], key=lambda d: d.id)
        ],
    }


@alerts_cli.command("silence")
def silence(
    run: Annotated[str, typer.Argument(help="Run id or project/name")],
    duration: Annotated[str, typer.Option("--for", help="30m, 2h, 1d ... or forever")] = "forever",
    reason: Annotated[str | None, typer.Option(help="Why (shown with the silence)")] = None,
) -> None:
    """Send no alerts for RUN for a while (or until unsilenced)."""
    from app.db import get_engine, session_scope
    from app.services import alerts as alert_service
    from app.services.runs import RunNotFound, find_run

    try:
        minutes = parse_duration(duration)
    except ValueError as exc:
        _fail(str(exc))
    _prepare()
    with session_scope(get_engine()) as session:
        try:
            found = find_run(session=session, ref=run)
        except RunNotFound as exc:
            _fail(str(exc))
        silenced = alert_service.silence_run(
            session=session, run_id=found.id, minutes=minutes, reason=reason
        )
        name = f"{found.project.name}/{found.name}"
        until = silenced.until
    typer.echo(
        f"silenced run {found.id} {name} "
        + (f"until {until:%Y-%m-%d %H:%M} UTC" if until else "until unsilenced")
    )


@alerts_cli.command("unsilence")
def unsilence(run: Annotated[str, typer.Argument(help="Run id or project/name")]) -> None:
    """Alert on RUN again."""
    from app.db import get_engine, session_scope
    from app.services import alerts as alert_service
    from app.services.runs import RunNotFound, find_run

    _prepare()
    with session_scope(get_engine()) as session:
        try:
            found = find_run(session=session, ref=run)
        except RunNotFound as exc:
            _fail(str(exc))
        removed = alert_service.unsilence_run(session=session, run_id=found.id)
    typer.echo(f"run {found.id} " + ("unsilenced" if removed else "was not silenced"))

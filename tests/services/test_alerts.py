"""Alert evaluation and delivery through the services, on SQLite and PostgreSQL: one alert per
finding, nothing new on re-analysis, a new revision when it escalates, silences, resolution,
concurrent evaluations, and the delivery state machine against a real loopback receiver."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, delete, func, select, update

from app.config import Settings
from app.db import session_scope
from app.models import Alert, AlertDelivery, Finding, IngestJob, Project, Run
from app.services import alert_delivery
from app.services import alerts as alert_service
from app.services import ingest as ingest_service
from app.services.sources import store_path
from tests.alerts.receivers import http_receiver


@pytest.fixture
def run_id(engine: Engine) -> int:
    with session_scope(engine) as session:
        project = Project(name="p")
        session.add(project)
        session.flush()
        run = Run(project_id=project.id, name="r", source_format="jsonl", status="running")
        session.add(run)
        session.flush()
        return run.id


def set_findings(engine: Engine, run_id: int, *findings: tuple[str, str, int]) -> None:
    """What an analysis does: replace the run's findings (kind, severity, resume step)."""
    with session_scope(engine) as session:
        session.execute(delete(Finding).where(Finding.run_id == run_id))
        for kind, severity, resume in findings:
            session.add(
                Finding(
                    run_id=run_id,
                    kind=kind,
                    severity=severity,
                    step=resume + 1,
                    resume_from_step=resume,
                    message=f"{kind} after the resume from step {resume} ({severity})",
                    evidence={"repair": {"advice": f"Resume from step_{resume:06d}."}},
                )
            )


def evaluate(engine: Engine, run_id: int, now: datetime | None = None) -> list[int]:
    with session_scope(engine) as session:
        return alert_service.evaluate(session=session, run_id=run_id, now=now)


def add_channels_and_rules(engine: Engine, url: str = "https://hooks.example.com/x") -> None:
    """Two channels on every warning-or-worse finding, a third only on lr_discontinuity."""
    with session_scope(engine) as session:
        for name in ("a", "b", "lr-only"):
            channel = alert_service.create_channel(
                session=session, name=name, kind="webhook", url=url, secret="k"
            )
            kinds = ["lr_discontinuity"] if name == "lr-only" else []
            alert_service.create_rule(
                session=session, project="p", channel=channel, kinds=kinds, min_severity="warning"
            )


def deliveries(engine: Engine) -> list[AlertDelivery]:
    with session_scope(engine) as session:
        return list(session.scalars(select(AlertDelivery).order_by(AlertDelivery.id)))


def alerts(engine: Engine) -> list[Alert]:
    with session_scope(engine) as session:
        return list(session.scalars(select(Alert).order_by(Alert.id)))


def test_one_finding_one_alert_and_nothing_new_on_reanalysis(engine: Engine, run_id: int) -> None:
    add_channels_and_rules(engine)
    set_findings(engine, run_id, ("resume_data_drift", "critical", 300), ("loss_spike", "info", 50))
    created = evaluate(engine, run_id)
    (alert,) = alerts(engine)  # the info spike matches no rule
    assert (alert.key, alert.severity, alert.revision, alert.step) == (
        "resume_data_drift:300",
        "critical",
        1,
        301,
    )
    rows = deliveries(engine)
    assert sorted(created) == [d.id for d in rows] and len(rows) == 2
    assert {d.state for d in rows} == {"pending"} and {d.revision for d in rows} == {1}
    assert rows[0].payload["resume_from_step"] == 300
    assert rows[0].payload["repair"] == "Resume from step_000300."
    assert rows[0].payload["project"] == "p" and rows[0].payload["run_name"] == "r"

    for _ in range(2):  # re-analysis replaces the finding rows: same key, nothing sent
        set_findings(engine, run_id, ("resume_data_drift", "critical", 300))
        assert evaluate(engine, run_id) == []
    assert len(alerts(engine)) == 1 and len(deliveries(engine)) == 2


def test_escalation_sends_a_new_revision_and_lower_severity_does_not(
    engine: Engine, run_id: int
) -> None:
    add_channels_and_rules(engine)
    set_findings(engine, run_id, ("state_not_restored", "warning", 300))
    assert len(evaluate(engine, run_id)) == 2
    set_findings(engine, run_id, ("state_not_restored", "critical", 300))
    escalated = evaluate(engine, run_id)
    (alert,) = alerts(engine)
    assert (alert.severity, alert.revision) == ("critical", 2)
    new = [d for d in deliveries(engine) if d.id in escalated]
    assert len(new) == 2 and {d.revision for d in new} == {2}
    assert {d.payload["previous_severity"] for d in new} == {"warning"}
    set_findings(engine, run_id, ("state_not_restored", "warning", 300))
    assert evaluate(engine, run_id) == []
    set_findings(engine, run_id, ("state_not_restored", "critical", 300))
    assert evaluate(engine, run_id) == []
    (alert,) = alerts(engine)
    assert (alert.severity, alert.revision) == ("critical", 2)
    assert len(deliveries(engine)) == 4


def test_silenced_run_stores_alerts_without_deliveries(engine: Engine, run_id: int) -> None:
    add_channels_and_rules(engine)
    now = datetime.now(UTC)
    with session_scope(engine) as session:
        alert_service.silence_run(session=session, run_id=run_id, minutes=None, reason="known")
    set_findings(engine, run_id, ("resume_data_drift", "critical", 300))
    assert evaluate(engine, run_id) == []
    (alert,) = alerts(engine)
    assert alert.silenced and deliveries(engine) == []

    with session_scope(engine) as session:  # a silence that has ended delivers again
        alert_service.silence_run(session=session, run_id=run_id, minutes=30, now=now)
    set_findings(
        engine, run_id, ("resume_data_drift", "critical", 300), ("step_gap", "warning", 500)
    )
    assert evaluate(engine, run_id, now=now + timedelta(minutes=10)) == []
    assert evaluate(engine, run_id, now=now + timedelta(minutes=40)) == []  # step_gap: stored
    set_findings(engine, run_id, ("lr_discontinuity", "warning", 700))
    assert len(evaluate(engine, run_id, now=now + timedelta(minutes=40))) == 3
    with session_scope(engine) as session:
        assert alert_service.unsilence_run(session=session, run_id=run_id)
        assert not alert_service.unsilence_run(session=session, run_id=run_id)


def test_alerts_resolve_when_their_finding_goes_and_reopen_quietly(
    engine: Engine, run_id: int
) -> None:
    add_channels_and_rules(engine)
    set_findings(engine, run_id, ("resume_data_drift", "critical", 300))
    evaluate(engine, run_id)
    set_findings(engine, run_id)
    assert evaluate(engine, run_id) == []
    (alert,) = alerts(engine)
    assert alert.resolved_at is not None
    set_findings(engine, run_id, ("resume_data_drift", "critical", 300))
    assert evaluate(engine, run_id) == []
    (alert,) = alerts(engine)
    assert alert.resolved_at is None and len(deliveries(engine)) == 2
    with session_scope(engine) as session:
        page, total = alert_service.list_alerts(
            session=session, filters=alert_service.AlertFilter(state="open", project="p")
        )
        assert total == 1 and page[0].run_name == "r"
        _, pending = alert_service.list_alerts(
            session=session, filters=alert_service.AlertFilter(state="pending")
        )
        _, resolved = alert_service.list_alerts(
            session=session, filters=alert_service.AlertFilter(state="resolved")
        )
        assert (pending, resolved) == (1, 0)


def test_disabled_rules_and_channels_send_nothing(engine: Engine, run_id: int) -> None:
    add_channels_and_rules(engine)
    with session_scope(engine) as session:
        for channel in alert_service.list_channels(session=session):
            if channel.name == "a":
                alert_service.update_channel(session=session, channel=channel, enabled=False)
        for rule, _ in alert_service.list_rules(session=session):
            if rule.channel.name == "b":
                rule.enabled = False
    set_findings(engine, run_id, ("resume_data_drift", "critical", 300))
    assert evaluate(engine, run_id) == []
    assert alerts(engine) == []


def test_concurrent_evaluations_create_one_alert_and_one_delivery_per_channel(
    engine: Engine, run_id: int
) -> None:
    add_channels_and_rules(engine)
    set_findings(engine, run_id, ("resume_data_drift", "critical", 300))
    barrier = threading.Barrier(2)
    results: list[list[int]] = []
    errors: list[BaseException] = []

    def one() -> None:
        try:
            barrier.wait()
            results.append(evaluate(engine, run_id))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert sorted(len(r) for r in results) == [0, 2]
    assert len(alerts(engine)) == 1 and len(deliveries(engine)) == 2


@pytest.fixture
def fast(tmp_path: Path, database_url: str) -> Settings:
    return Settings(
        home=tmp_path / "home",
        database_url=database_url,
        webhook_allow_private=True,
        alert_retry_base_s=0.2,
        alert_max_attempts=3,
        public_url="http://runwatch.test",
    )


def deliver_until_done(engine: Engine, settings: Settings, delivery_id: int) -> list[str]:
    """What the task does, without the queue: attempt, wait the backoff, attempt again."""
    states = []
    for _ in range(20):
        outcome = alert_delivery.deliver(engine=engine, settings=settings, delivery_id=delivery_id)
        states.append(outcome.state)
        if outcome.retry_in is None:
            return states
        again = alert_delivery.deliver(engine=engine, settings=settings, delivery_id=delivery_id)
        assert again.state == "skipped"  # not due yet: a duplicate message sends nothing
        time.sleep(outcome.retry_in)
    raise AssertionError(states)


def test_delivery_retries_with_backoff_then_succeeds(
    engine: Engine, run_id: int, fast: Settings
) -> None:
    with http_receiver([500, 503]) as receiver:
        add_channels_and_rules(engine, url=f"{receiver.url}/hook")
        set_findings(engine, run_id, ("resume_data_drift", "critical", 300))
        first, second = evaluate(engine, run_id)
        assert deliver_until_done(engine, fast, first) == ["pending", "pending", "sent"]
        assert deliver_until_done(engine, fast, second) == ["sent"]
        assert alert_delivery.deliver(engine=engine, settings=fast, delivery_id=first).state == (
            "skipped"
        )
    statuses = [r.status for r in receiver.requests]
    assert statuses == [500, 503, 200, 200]
    gaps = [b.at - a.at for a, b in zip(receiver.requests, receiver.requests[1:], strict=False)]
    assert gaps[0] >= 0.2 and gaps[1] >= 0.4  # base, then twice the base
    rows = {d.id: d for d in deliveries(engine)}
    assert rows[first].state == "sent" and rows[first].attempts == 3
    assert rows[first].last_error is not None and "HTTP 503" in rows[first].last_error
    assert rows[first].sent_at is not None and rows[second].last_error is None
    assert "http://runwatch.test/runs/" in receiver.requests[0].json()["text"]


def test_delivery_fails_after_max_attempts_or_when_the_channel_is_disabled(
    engine: Engine, run_id: int, fast: Settings
) -> None:
    with http_receiver(default=500) as receiver:
        add_channels_and_rules(engine, url=f"{receiver.url}/hook")
        set_findings(engine, run_id, ("resume_data_drift", "critical", 300))
        first, second = evaluate(engine, run_id)
        assert deliver_until_done(engine, fast, first) == ["pending", "pending", "failed"]
        with session_scope(engine) as session:
            channel = session.get(AlertDelivery, second).channel  # type: ignore[union-attr]
            alert_service.update_channel(session=session, channel=channel, enabled=False)
        assert deliver_until_done(engine, fast, second) == ["failed"]
    assert len(receiver.requests) == 3
    rows = {d.id: d for d in deliveries(engine)}
    assert rows[first].attempts == 3 and "HTTP 500" in (rows[first].last_error or "")
    assert rows[second].attempts == 0 and "was disabled" in (rows[second].last_error or "")


def test_sweep_requeues_lost_and_stuck_deliveries(engine: Engine, run_id: int) -> None:
    add_channels_and_rules(engine)
    set_findings(engine, run_id, ("resume_data_drift", "critical", 300))
    lost, stuck = evaluate(engine, run_id)
    now = datetime.now(UTC)
    with session_scope(engine) as session:
        assert alert_delivery.sweep(session=session, now=now) == []  # just queued: not lost
        session.execute(
            update(AlertDelivery)
            .where(AlertDelivery.id == stuck)
            .values(state="sending", updated_at=now - timedelta(minutes=6))
        )
    with session_scope(engine) as session:
        assert alert_delivery.sweep(session=session, now=now + timedelta(minutes=2)) == [
            lost,
            stuck,
        ]
    with session_scope(engine) as session:
        row = session.get(AlertDelivery, stuck)
        assert (
            row is not None and row.state == "pending" and "interrupted" in (row.last_error or "")
        )
        total = session.scalar(select(func.count()).select_from(AlertDelivery))
        assert total == 2


def test_ingest_hands_committed_deliveries_over_and_survives_an_alert_bug(
    engine: Engine, fast: Settings, example_runs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with session_scope(engine) as session:
        channel = alert_service.create_channel(
            session=session, name="hook", kind="webhook", url="https://hooks.example.com/x"
        )
        alert_service.create_rule(session=session, project="ingested", channel=channel)
    handed: list[list[int]] = []

    def on_alerts(ids: list[int]) -> None:  # what the task does: enqueue, after the commit
        with session_scope(engine) as other:
            visible = other.scalars(select(AlertDelivery.id).where(AlertDelivery.id.in_(ids)))
            assert sorted(visible) == sorted(ids)
        handed.append(ids)

    job = ingest_with(engine, fast, example_runs / "megatron_offset", "ingested", on_alerts)
    assert job.state == "succeeded" and len(handed) == 1 and len(handed[0]) == 1
    (alert,) = alerts(engine)
    assert alert.key == "resume_data_drift:300" and alert.severity == "critical"

    def broken(**kwargs: object) -> list[int]:
        raise RuntimeError("alert bug")

    monkeypatch.setattr(alert_service, "evaluate", broken)
    job = ingest_with(engine, fast, example_runs / "megatron_offset", "other", on_alerts)
    assert job.state == "succeeded" and job.warnings == [] and len(handed) == 1
    with session_scope(engine) as session:
        run = session.get(Run, job.run_id)
        assert run is not None and run.verdict == "fail"  # the analysis was kept


def ingest_with(
    engine: Engine, settings: Settings, path: Path, project: str, on_alerts: Callable[..., None]
) -> IngestJob:
    source = store_path(path, settings)
    with session_scope(engine) as session:
        job_id = ingest_service.submit(
            session=session, source=source, project=project, run_name=source.default_run_name
        ).id
    return ingest_service.run_job(
        engine=engine, settings=settings, job_id=job_id, on_alerts=on_alerts
    )

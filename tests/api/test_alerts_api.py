"""The alerts API in process on both backends: channels (admin; secrets never shown), rules
(write on their project), silences, alert listings with deliveries, the test button."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from app.config import Settings
from app.db import session_scope
from app.models import Finding
from app.services import alerts as alert_service
from app.services import live as live_service
from app.services.tokens import create_token
from tests.alerts.receivers import http_receiver
from tests.api.access import make_api

SECRET_PATH = "/services/T000/B000/TOPSECRETPATH"


@pytest.fixture
def client(engine: Engine, tmp_path: Path, database_url: str) -> Iterator[TestClient]:
    settings = Settings(
        home=tmp_path / "home",
        database_url=database_url,
        webhook_allow_private=True,
        alert_timeout_s=5,
        public_url="http://rw.test",
    )
    with TestClient(make_api(engine, settings)) as client:
        yield client


@pytest.fixture
def tokens(engine: Engine) -> dict[str, dict[str, str]]:
    wanted = {
        "admin": ("admin", None),
        "write": ("write", None),
        "write_alpha": ("write", "alpha"),
        "read_alpha": ("read", "alpha"),
        "write_beta": ("write", "beta"),
    }
    with session_scope(engine) as session:
        secrets = {
            name: create_token(session=session, name=name, scope=scope, project=project)[1]
            for name, (scope, project) in wanted.items()
        }
    return {name: {"Authorization": f"Bearer {secret}"} for name, secret in secrets.items()}


def alpha_run_with_alert(engine: Engine, channel_name: str) -> tuple[int, int]:
    """A run in alpha with a critical finding evaluated against a rule: (run id, beta run id)."""
    with session_scope(engine) as session:
        run, _ = live_service.get_or_create_run(session=session, project="alpha", name="a")
        beta, _ = live_service.get_or_create_run(session=session, project="beta", name="b")
        session.flush()
        session.add(
            Finding(
                run_id=run.id,
                kind="resume_data_drift",
                severity="critical",
                step=301,
                resume_from_step=300,
                message="drift",
                evidence={},
            )
        )
        channel = alert_service.channel_by_name(session=session, name=channel_name)
        assert channel is not None
        alert_service.create_rule(session=session, project="alpha", channel=channel)
        session.flush()
        assert len(alert_service.evaluate(session=session, run_id=run.id)) == 1
        return run.id, beta.id


def test_channels_are_admin_only_and_never_show_secrets(
    client: TestClient, tokens: dict[str, dict[str, str]]
) -> None:
    body = {
        "name": "ops",
        "kind": "webhook",
        "url": f"https://hooks.example.com{SECRET_PATH}",
        "secret": "HMACKEY",
    }
    for who, status in (("write", 403), ("write_alpha", 403), ("read_alpha", 403)):
        assert (
            client.post("/api/v1/alerts/channels", json=body, headers=tokens[who]).status_code
            == status
        )
        assert client.get("/api/v1/alerts/channels", headers=tokens[who]).status_code == status
    assert client.post("/api/v1/alerts/channels", json=body).status_code == 401
    created = client.post("/api/v1/alerts/channels", json=body, headers=tokens["admin"])
    assert created.status_code == 201, created.text
    channel = created.json()
    assert channel["target"] == "https://hooks.example.com/…" and channel["has_secret"] is True
    listed = client.get("/api/v1/alerts/channels", headers=tokens["admin"])
    for text in (created.text, listed.text):
        assert "TOPSECRETPATH" not in text and "HMACKEY" not in text
    again = client.post("/api/v1/alerts/channels", json=body, headers=tokens["admin"])
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"
    bad = client.post(
        "/api/v1/alerts/channels",
        json={"name": "x", "kind": "webhook", "url": "ftp://h/x"},
        headers=tokens["admin"],
    )
    assert bad.status_code == 422 and "http" in bad.json()["error"]["message"]
    no_rcpt = client.post(
        "/api/v1/alerts/channels", json={"name": "m", "kind": "email"}, headers=tokens["admin"]
    )
    assert no_rcpt.status_code == 422
    url = f"/api/v1/alerts/channels/{channel['id']}"
    patched = client.patch(url, json={"secret": None, "enabled": False}, headers=tokens["admin"])
    assert patched.json()["has_secret"] is False and patched.json()["enabled"] is False
    assert client.patch(url, json={"enabled": True}, headers=tokens["write"]).status_code == 403
    assert client.delete(url, headers=tokens["write"]).status_code == 403
    assert client.delete(url, headers=tokens["admin"]).status_code == 204
    assert client.delete(url, headers=tokens["admin"]).status_code == 404


def test_test_button_sends_now_and_says_why_it_failed(
    client: TestClient, tokens: dict[str, dict[str, str]]
) -> None:
    with http_receiver([200, 500]) as receiver:
        made = client.post(
            "/api/v1/alerts/channels",
            json={"name": "hook", "kind": "webhook", "url": f"{receiver.url}/h", "secret": "k"},
            headers=tokens["admin"],
        ).json()
        url = f"/api/v1/alerts/channels/{made['id']}/test"
        assert client.post(url, headers=tokens["write"]).status_code == 403
        assert client.post(url, headers=tokens["admin"]).json() == {"ok": True, "error": None}
        failed = client.post(url, headers=tokens["admin"]).json()
    assert failed["ok"] is False and "HTTP 500" in failed["error"]
    assert [r.headers["X-Runwatch-Event"] for r in receiver.requests] == ["test", "test"]


def test_rules_need_write_on_their_project(
    client: TestClient, tokens: dict[str, dict[str, str]]
) -> None:
    client.post(
        "/api/v1/alerts/channels",
        json={"name": "mail", "kind": "email", "recipients": ["oncall@example.com"]},
        headers=tokens["admin"],
    )
    rule = {"project": "alpha", "channel": "mail", "kinds": ["resume_data_drift"]}
    assert (
        client.post("/api/v1/alerts/rules", json=rule, headers=tokens["write_beta"]).status_code
        == 403
    )
    assert (
        client.post("/api/v1/alerts/rules", json=rule, headers=tokens["read_alpha"]).status_code
        == 403
    )
    made = client.post("/api/v1/alerts/rules", json=rule, headers=tokens["write_alpha"])
    assert made.status_code == 201, made.text
    assert made.json()["min_severity"] == "warning" and made.json()["channel"] == "mail"
    beta = client.post(
        "/api/v1/alerts/rules",
        json={"project": "beta", "channel_id": made.json()["channel_id"], "min_severity": "info"},
        headers=tokens["write_beta"],
    )
    assert beta.status_code == 201
    unknown = {"project": "alpha", "channel": "nope"}
    assert (
        client.post("/api/v1/alerts/rules", json=unknown, headers=tokens["write_alpha"]).status_code
        == 422
    )
    both = {"project": "alpha"}
    assert (
        client.post("/api/v1/alerts/rules", json=both, headers=tokens["write_alpha"]).status_code
        == 422
    )
    seen = client.get("/api/v1/alerts/rules", headers=tokens["read_alpha"]).json()
    assert [r["project"] for r in seen] == ["alpha"]
    assert len(client.get("/api/v1/alerts/rules", headers=tokens["admin"]).json()) == 2
    assert (
        client.get("/api/v1/alerts/rules?project=beta", headers=tokens["read_alpha"]).status_code
        == 403
    )
    url = f"/api/v1/alerts/rules/{made.json()['id']}"
    assert client.delete(url, headers=tokens["write_beta"]).status_code == 403
    assert client.delete(url, headers=tokens["write_alpha"]).status_code == 204


def test_alert_listing_detail_and_silence(
    client: TestClient, engine: Engine, tokens: dict[str, dict[str, str]]
) -> None:
    client.post(
        "/api/v1/alerts/channels",
        json={"name": "chat", "kind": "slack", "url": f"https://hooks.example.com{SECRET_PATH}"},
        headers=tokens["admin"],
    )
    run_id, beta_run = alpha_run_with_alert(engine, "chat")
    page = client.get("/api/v1/alerts?project=alpha&state=pending", headers=tokens["read_alpha"])
    assert page.status_code == 200, page.text
    body = page.json()
    assert (body["total"], body["limit"], body["offset"]) == (1, 50, 0)
    (item,) = body["items"]
    assert item["kind"] == "resume_data_drift" and item["url"] == f"http://rw.test/runs/{run_id}"
    assert client.get("/api/v1/alerts?state=sent", headers=tokens["admin"]).json()["total"] == 0
    assert (
        client.get("/api/v1/alerts?severity=warning", headers=tokens["admin"]).json()["total"] == 0
    )
    assert (
        client.get("/api/v1/alerts?limit=1&offset=1", headers=tokens["admin"]).json()["items"] == []
    )
    assert client.get("/api/v1/alerts?state=bogus", headers=tokens["admin"]).status_code == 422
    assert (
        client.get("/api/v1/alerts?project=alpha", headers=tokens["write_beta"]).status_code == 403
    )
    scoped = client.get("/api/v1/alerts", headers=tokens["write_beta"]).json()
    assert scoped["total"] == 0  # a beta token sees beta's alerts only
    detail = client.get(f"/api/v1/alerts/{item['id']}", headers=tokens["read_alpha"]).json()
    (delivery,) = detail["deliveries"]
    assert delivery["channel"] == "chat" and delivery["state"] == "pending"
    assert delivery["attempts"] == 0 and delivery["last_error"] is None
    assert delivery["sent_at"] is None
    assert "TOPSECRETPATH" not in str(detail)
    assert (
        client.get(f"/api/v1/alerts/{item['id']}", headers=tokens["write_beta"]).status_code == 403
    )
    assert client.get("/api/v1/alerts/999999", headers=tokens["admin"]).status_code == 404

    url = f"/api/v1/runs/{run_id}/silence"
    assert client.put(url, json={"minutes": 90}, headers=tokens["write_beta"]).status_code == 403
    assert client.put(url, json={"minutes": 90}, headers=tokens["read_alpha"]).status_code == 403
    silenced = client.put(
        url, json={"minutes": 90, "reason": "known"}, headers=tokens["write_alpha"]
    )
    assert silenced.status_code == 200, silenced.text
    until = datetime.fromisoformat(silenced.json()["until"])
    assert abs(until - (datetime.now(UTC) + timedelta(minutes=90))) < timedelta(minutes=1)
    forever = client.put(url, json={"minutes": None}, headers=tokens["write_alpha"]).json()
    assert forever["until"] is None
    with session_scope(engine) as session:
        assert alert_service.is_silenced(session=session, run_id=run_id)
    assert client.put(url, json={"minutes": 0}, headers=tokens["write_alpha"]).status_code == 422
    assert client.delete(url, headers=tokens["write_alpha"]).status_code == 204
    with session_scope(engine) as session:
        assert not alert_service.is_silenced(session=session, run_id=run_id)
    other = f"/api/v1/runs/{beta_run}/silence"
    assert client.delete(other, headers=tokens["write_alpha"]).status_code == 403
    assert (
        client.put("/api/v1/runs/999999/silence", json={}, headers=tokens["admin"]).status_code
        == 404
    )


def test_openapi_documents_the_alert_models(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    ok = schema["paths"]["/api/v1/alerts"]["get"]["responses"]["200"]
    assert ok["content"]["application/json"]["schema"]["$ref"].endswith("/AlertPage")
    assert "has_secret" in schema["components"]["schemas"]["ChannelOut"]["properties"]
    assert "secret" not in schema["components"]["schemas"]["ChannelOut"]["properties"]

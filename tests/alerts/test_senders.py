"""The senders against real receivers on loopback: signed webhook, Slack-compatible JSON, SMTP."""

from __future__ import annotations

import hashlib
import hmac
import logging

import pytest

from app.alerts.message import AlertFacts, compose, compose_test
from app.alerts.policy import TargetPolicy
from app.alerts.senders import (
    Channel,
    DeliveryError,
    SendOptions,
    SmtpConfig,
    send,
    sign,
)
from tests.alerts.receivers import http_receiver, smtp_server

FACTS = AlertFacts(
    run_id=4,
    project="p",
    run_name="r",
    kind="resume_data_drift",
    severity="critical",
    step=301,
    resume_from_step=300,
    message="Data drift.",
    alert_id=9,
    key="resume_data_drift:300",
)
LOOPBACK = SendOptions(TargetPolicy(allow_private=True), SmtpConfig(host=None), timeout_s=5)


def verify(secret: str, body: bytes, header: str) -> bool:
    """What a receiver does (docs/alerts.md)."""
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, header)


def test_signature_is_hmac_sha256_of_the_exact_body() -> None:
    body = b'{"event":"alert"}'
    assert verify("s3cret", body, sign("s3cret", body))
    assert not verify("s3cret", body + b" ", sign("s3cret", body))
    assert not verify("other", body, sign("s3cret", body))


def test_webhook_is_signed_and_names_delivery_and_event() -> None:
    with http_receiver() as receiver:
        channel = Channel("webhook", "ops", f"{receiver.url}/hook", secret="s3cret")
        send(channel, compose(FACTS, "http://rw"), delivery_id=42, options=LOOPBACK)
        send(channel, compose_test("ops", "http://rw"), delivery_id=None, options=LOOPBACK)
    alert, test = receiver.requests
    assert alert.path == "/hook"
    assert verify("s3cret", alert.body, alert.headers["X-Runwatch-Signature"])
    assert alert.headers["X-Runwatch-Delivery"] == "42"
    assert alert.headers["X-Runwatch-Event"] == "alert"
    assert alert.headers["Content-Type"] == "application/json"
    assert alert.json()["alert"]["key"] == "resume_data_drift:300"
    assert "http://rw/runs/4" in alert.json()["text"]
    assert test.headers["X-Runwatch-Event"] == "test"
    assert test.headers["X-Runwatch-Delivery"] == "test"
    assert verify("s3cret", test.body, test.headers["X-Runwatch-Signature"])


def test_slack_gets_text_and_blocks_and_no_signature() -> None:
    with http_receiver() as receiver:
        channel = Channel("slack", "chat", f"{receiver.url}/services/T0/B0/XYZ")
        send(channel, compose(FACTS, "http://rw"), delivery_id=1, options=LOOPBACK)
    (request,) = receiver.requests
    body = request.json()
    assert set(body) == {"text", "blocks"}
    assert "resume_data_drift" in body["text"] and "step 300" in body["text"]
    assert "X-Runwatch-Signature" not in request.headers


def test_failures_redirects_and_refusals_are_errors_without_secrets(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    message = compose(FACTS, "http://rw")
    with http_receiver([500, 302]) as receiver:
        channel = Channel("slack", "chat", f"{receiver.url}/services/T0/B0/TOPSECRET")
        with pytest.raises(DeliveryError, match="answered HTTP 500: receiver says no") as failed:
            send(channel, message, delivery_id=1, options=LOOPBACK)
        assert not failed.value.permanent
        with pytest.raises(DeliveryError, match="redirects are not followed"):
            send(channel, message, delivery_id=1, options=LOOPBACK)
        assert len(receiver.requests) == 2  # the redirect was not followed
        strict = SendOptions(TargetPolicy(), SmtpConfig(host=None), timeout_s=5)
        with pytest.raises(DeliveryError, match="internal address") as refused:
            send(channel, message, delivery_id=1, options=strict)
        assert refused.value.permanent
        assert len(receiver.requests) == 2
    hook = Channel("webhook", "ops", "http://127.0.0.1:9/x/TOPSECRET", secret="HMACSECRET")
    with pytest.raises(DeliveryError, match="ConnectError"):
        send(hook, message, delivery_id=1, options=LOOPBACK)
    errors = str(failed.value) + str(refused.value)
    assert "TOPSECRET" not in errors + caplog.text and "HMACSECRET" not in caplog.text
    assert "POST http://127.0.0.1/…" in caplog.text  # httpx's own log line, redacted


def test_email_through_a_real_smtp_server() -> None:
    with smtp_server() as inbox:
        config = SmtpConfig(host=inbox.host, port=inbox.port, sender="rw@example.com")
        options = SendOptions(TargetPolicy(), config, timeout_s=5)
        channel = Channel("email", "mail", recipients=("a@example.com", "b@example.com"))
        send(channel, compose(FACTS, "http://rw"), delivery_id=3, options=options)
        (email,) = inbox.wait_for(1)
    assert inbox.recipients == [["a@example.com", "b@example.com"]]
    assert email["Subject"].startswith("Runwatch critical: resume_data_drift in p/r")
    assert email["From"] == "rw@example.com"
    body = email.get_content()
    assert "resume from step 300" in body and "http://rw/runs/4" in body


def test_email_errors() -> None:
    message = compose(FACTS, "http://rw")
    channel = Channel("email", "mail", recipients=("a@example.com",))
    with pytest.raises(DeliveryError, match="RUNWATCH_SMTP_HOST") as unset:
        send(channel, message, delivery_id=1, options=LOOPBACK)
    assert unset.value.permanent
    closed = SendOptions(TargetPolicy(), SmtpConfig(host="127.0.0.1", port=9), timeout_s=2)
    with pytest.raises(DeliveryError, match=r"SMTP 127\.0\.0\.1:9"):
        send(channel, message, delivery_id=1, options=closed)

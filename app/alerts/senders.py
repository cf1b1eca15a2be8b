"""Send one message through one channel: generic webhook, Slack-compatible webhook or email.

Errors come back as ``DeliveryError`` with a message safe to store and show: it names the
target by scheme and host only, never a secret, a webhook path or a password.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import json
import logging
import smtplib
import ssl
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.utils import make_msgid

import httpx

from app.alerts.message import Message, slack_body, webhook_body
from app.alerts.policy import TargetPolicy, TargetRefused, redact

log = logging.getLogger(__name__)
_sending = contextvars.ContextVar("runwatch_alert_sending", default=False)


class _HideAlertURLs(logging.Filter):
    """httpx logs every request's full URL at INFO; an alert URL's path is a secret."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _sending.get() and isinstance(record.args, tuple):
            record.args = tuple(
                redact(str(arg)) if isinstance(arg, httpx.URL) else arg for arg in record.args
            )
        return True


logging.getLogger("httpx").addFilter(_HideAlertURLs())

WEBHOOK, SLACK, EMAIL = "webhook", "slack", "email"
KINDS = (WEBHOOK, SLACK, EMAIL)
SIGNATURE_HEADER = "X-Runwatch-Signature"
USER_AGENT = "Runwatch-Alerts/1"


class DeliveryError(Exception):
    """The message did not get through. ``permanent``: retrying cannot help (a setting)."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


@dataclass(frozen=True)
class Channel:
    kind: str
    name: str
    url: str | None = None
    recipients: tuple[str, ...] = ()
    secret: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class SmtpConfig:
    host: str | None
    port: int = 587
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    starttls: bool = True
    sender: str = "runwatch@localhost"


@dataclass(frozen=True)
class SendOptions:
    policy: TargetPolicy
    smtp: SmtpConfig
    timeout_s: float = 10.0


def sign(secret: str, body: bytes) -> str:
    """``sha256=<hex HMAC-SHA256 of the exact body bytes>``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def encode(body: dict[str, object]) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def send(
    channel: Channel, message: Message, *, delivery_id: int | None, options: SendOptions
) -> None:
    if channel.kind == WEBHOOK:
        body = encode(webhook_body(message, delivery_id))
        headers = {
            "X-Runwatch-Delivery": str(delivery_id) if delivery_id is not None else "test",
            "X-Runwatch-Event": message.event,
        }
        if channel.secret:
            headers[SIGNATURE_HEADER] = sign(channel.secret, body)
        post_json(channel.url, body, headers, options)
    elif channel.kind == SLACK:
        post_json(channel.url, encode(slack_body(message)), {}, options)
    elif channel.kind == EMAIL:
        send_email(options.smtp, channel.recipients, message, options.timeout_s)
    else:
        raise DeliveryError(f"unknown channel kind {channel.kind!r}", permanent=True)


def post_json(url: str | None, body: bytes, headers: dict[str, str], options: SendOptions) -> None:
    """POST to the policy-checked address; redirects are not followed."""
    if not url:
        raise DeliveryError("the channel has no URL", permanent=True)
    try:
        target = options.policy.check(url)
    except TargetRefused as exc:
        raise DeliveryError(f"refused: {exc}", permanent=True) from None
    shown = redact(url)
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    request_headers = {
        **headers,
        "Host": target.host_header,
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
    }
    token = _sending.set(True)
    try:
        with httpx.Client(
            timeout=options.timeout_s, follow_redirects=False, trust_env=False
        ) as client:
            response = client.post(
                target.pinned_url, content=body, headers=request_headers, extensions=extensions
            )
    except httpx.HTTPError as exc:
        detail = _scrub(str(exc), url, target.pinned_url)
        raise DeliveryError(f"{shown}: {type(exc).__name__}: {detail}") from None
    finally:
        _sending.reset(token)
    if response.is_redirect:
        raise DeliveryError(
            f"{shown} answered HTTP {response.status_code} (redirects are not followed)"
        )
    if not response.is_success:
        snippet = " ".join(response.text[:200].split())
        raise DeliveryError(f"{shown} answered HTTP {response.status_code}: {snippet}".rstrip(": "))
    log.info("alert delivered to %s (HTTP %s)", shown, response.status_code)


def _scrub(text: str, *urls: str) -> str:
    for url in urls:
        text = text.replace(url, redact(url))
    return text


def send_email(
    config: SmtpConfig, recipients: tuple[str, ...], message: Message, timeout_s: float
) -> None:
    if not config.host:
        raise DeliveryError("email alerts need RUNWATCH_SMTP_HOST", permanent=True)
    if not recipients:
        raise DeliveryError("the channel has no recipients", permanent=True)
    email = EmailMessage()
    email["Subject"] = message.title
    email["From"] = config.sender
    email["To"] = ", ".join(recipients)
    email["Message-ID"] = make_msgid(domain="runwatch")
    email.set_content(message.text)
    where = f"SMTP {config.host}:{config.port}"
    try:
        with smtplib.SMTP(config.host, config.port, timeout=timeout_s) as smtp:
            smtp.ehlo()
            if config.starttls and smtp.has_extn("starttls"):
                smtp.starttls(context=ssl.create_default_context())
                smtp.ehlo()
            if config.user:
                smtp.login(config.user, config.password or "")
            smtp.send_message(email)
    except (smtplib.SMTPException, OSError) as exc:
        raise DeliveryError(f"{where}: {type(exc).__name__}: {exc}") from None
    log.info("alert emailed to %d recipient(s) through %s", len(recipients), where)

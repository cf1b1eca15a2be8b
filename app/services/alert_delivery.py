"""Delivering alerts: claim a pending delivery, send it outside any transaction, record the outcome
and when to try again.

A delivery is claimed with one conditional UPDATE (pending and due → sending), so a redelivered
or duplicated task message sends nothing twice. Failures go back to pending with a due time that
doubles per attempt (``alert_retry_base_s``, capped by ``alert_retry_max_s``) until
``alert_max_attempts``; then the delivery is failed with its last error. ``sweep`` finds what a
lost message or a crashed worker left behind.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, or_, select, update
from sqlalchemy.orm import Session

from app.alerts.message import AlertFacts, compose, compose_test
from app.alerts.policy import TargetPolicy
from app.alerts.senders import Channel, DeliveryError, SendOptions, SmtpConfig, send
from app.config import Settings
from app.db import session_scope
from app.models import AlertChannel, AlertDelivery

log = logging.getLogger(__name__)

PENDING, SENDING, SENT, FAILED = "pending", "sending", "sent", "failed"
DELIVERY_STATES = (PENDING, SENDING, SENT, FAILED)
SKIPPED = "skipped"  # not claimed: already handled, or not due yet
STUCK_AFTER = timedelta(minutes=5)  # 'sending' this long: the worker died mid-send
LOST_AFTER = timedelta(seconds=60)  # 'pending' this long past due: its queue message was lost
MAX_ERROR_CHARS = 2000


@dataclass(frozen=True)
class Outcome:
    state: str  # sent, pending (retry in ``retry_in`` seconds), failed, skipped
    attempts: int = 0
    retry_in: float | None = None
    error: str | None = None


def send_options(settings: Settings) -> SendOptions:
    return SendOptions(
        policy=TargetPolicy(
            allow_private=settings.webhook_allow_private,
            allow_hosts=settings.webhook_allow_hosts,
            deny_hosts=settings.webhook_deny_hosts,
        ),
        smtp=SmtpConfig(
            host=settings.smtp_host,
            port=settings.smtp_port,
            user=settings.smtp_user,
            password=settings.smtp_password,
            starttls=settings.smtp_starttls,
            sender=settings.smtp_from,
        ),
        timeout_s=settings.alert_timeout_s,
    )


def sender_channel(channel: AlertChannel) -> Channel:
    return Channel(
        kind=channel.kind,
        name=channel.name,
        url=channel.url,
        recipients=tuple(channel.recipients or ()),
        secret=channel.secret,
    )


def send_test(*, channel: AlertChannel, settings: Settings) -> None:
    """Send a test message through ``channel`` now; raises ``DeliveryError``."""
    message = compose_test(channel.name, settings.base_url)
    send(sender_channel(channel), message, delivery_id=None, options=send_options(settings))


def retry_delay(settings: Settings, attempts: int) -> float:
    """Seconds before attempt ``attempts + 1``: base, 2 x base, 4 x base, ... capped."""
    return float(
        min(settings.alert_retry_base_s * 2 ** max(attempts - 1, 0), settings.alert_retry_max_s)
    )


def claim(*, session: Session, delivery_id: int, now: datetime) -> bool:
    """Atomically move a due pending delivery to sending; False when someone else has it."""
    result = session.execute(
        update(AlertDelivery)
        .where(
            AlertDelivery.id == delivery_id,
            AlertDelivery.state == PENDING,
            or_(AlertDelivery.next_attempt_at.is_(None), AlertDelivery.next_attempt_at <= now),
        )
        .values(state=SENDING, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0) == 1)


def deliver(*, engine: Engine, settings: Settings, delivery_id: int) -> Outcome:
    """One attempt at one delivery. Safe to call for any id, any number of times."""
    with session_scope(engine) as session:
        if not claim(session=session, delivery_id=delivery_id, now=datetime.now(UTC)):
            return Outcome(SKIPPED)
        delivery = session.get(AlertDelivery, delivery_id)
        assert delivery is not None
        channel = delivery.channel
        if not channel.enabled:
            delivery.state, delivery.next_attempt_at = FAILED, None
            delivery.last_error = f"channel {channel.name!r} was disabled before delivery"
            log.warning("alert delivery %s: %s", delivery_id, delivery.last_error)
            return Outcome(FAILED, delivery.attempts, error=delivery.last_error)
        target = sender_channel(channel)
        message = compose(AlertFacts.from_dict(delivery.payload or {}), settings.base_url)
    error: DeliveryError | None = None
    try:
        send(target, message, delivery_id=delivery_id, options=send_options(settings))
    except DeliveryError as exc:
        error = exc
    except Exception as exc:  # a sender bug must not leave the delivery 'sending'
        log.exception("alert delivery %s: unexpected error", delivery_id)
        error = DeliveryError(f"internal error: {type(exc).__name__}")
    with session_scope(engine) as session:
        return _record(session, settings, delivery_id, error)


def _record(
    session: Session, settings: Settings, delivery_id: int, error: DeliveryError | None
) -> Outcome:
    delivery = session.get(AlertDelivery, delivery_id)
    if delivery is None:  # the alert or channel was deleted meanwhile
        return Outcome(SKIPPED)
    now = datetime.now(UTC)
    delivery.attempts = (delivery.attempts or 0) + 1
    delivery.updated_at = now
    if error is None:
        delivery.state, delivery.sent_at, delivery.next_attempt_at = SENT, now, None
        return Outcome(SENT, delivery.attempts)
    delivery.last_error = str(error)[:MAX_ERROR_CHARS]
    if error.permanent or delivery.attempts >= settings.alert_max_attempts:
        delivery.state, delivery.next_attempt_at = FAILED, None
        log.warning(
            "alert delivery %s failed after %d attempt(s): %s",
            delivery_id,
            delivery.attempts,
            delivery.last_error,
        )
        return Outcome(FAILED, delivery.attempts, error=delivery.last_error)
    delay = retry_delay(settings, delivery.attempts)
    delivery.state, delivery.next_attempt_at = PENDING, now + timedelta(seconds=delay)
    log.info(
        "alert delivery %s attempt %d failed, retrying in %.1f s: %s",
        delivery_id,
        delivery.attempts,
        delay,
        delivery.last_error,
    )
    return Outcome(PENDING, delivery.attempts, retry_in=delay, error=delivery.last_error)


def sweep(*, session: Session, now: datetime | None = None) -> list[int]:
    """Ids to enqueue again: 'sending' ones stuck past ``STUCK_AFTER`` (reset to pending) and
    pending ones more than ``LOST_AFTER`` past due (their message was lost)."""
    now = now or datetime.now(UTC)
    stuck = list(
        session.scalars(
            select(AlertDelivery.id).where(
                AlertDelivery.state == SENDING, AlertDelivery.updated_at < now - STUCK_AFTER
            )
        )
    )
    if stuck:
        session.execute(
            update(AlertDelivery)
            .where(AlertDelivery.id.in_(stuck), AlertDelivery.state == SENDING)
            .values(
                state=PENDING,
                next_attempt_at=now,
                updated_at=now,
                last_error="interrupted while sending (the worker stopped); sent again",
            )
            .execution_options(synchronize_session=False)
        )
    lost = session.scalars(
        select(AlertDelivery.id).where(
            AlertDelivery.state == PENDING,
            or_(
                AlertDelivery.next_attempt_at.is_(None),
                AlertDelivery.next_attempt_at <= now - LOST_AFTER,
            ),
        )
    )
    return sorted({*stuck, *lost})

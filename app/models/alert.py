"""Alerting: channels (where), rules (what, per project), alerts (one per finding) and their
deliveries (one per alert revision and channel, with retry state), and per-run silences."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.models.base import Base, JSONType, UTCDateTime, utcnow


class AlertChannel(Base):
    __tablename__ = "alert_channel"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    kind: Mapped[str] = mapped_column(String(20))  # webhook, slack, email
    url: Mapped[str | None] = mapped_column(Text)  # webhook / slack target
    recipients: Mapped[list[str] | None] = mapped_column(JSONType)  # email addresses
    secret: Mapped[str | None] = mapped_column(Text)  # HMAC key of generic webhooks; never shown
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class AlertRule(Base):
    """Findings of ``project`` with a kind in ``kinds`` (all when empty) and at least
    ``min_severity`` go to ``channel``."""

    __tablename__ = "alert_rule"

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(
        ForeignKey("project.id", ondelete="CASCADE"), index=True
    )
    channel_id: Mapped[int] = mapped_column(
        ForeignKey("alert_channel.id", ondelete="CASCADE"), index=True
    )
    kinds: Mapped[list[str]] = mapped_column(JSONType, default=list)
    min_severity: Mapped[str] = mapped_column(String(20), default="warning")
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    channel: Mapped[AlertChannel] = relationship()


class Alert(Base):
    """One per (run, finding key): re-analysis finding the same problem updates it; a higher
    severity bumps ``revision`` and is delivered again."""

    __tablename__ = "alert"
    __table_args__ = (
        UniqueConstraint("run_id", "key"),
        Index("ix_alert_updated_at", "updated_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"), index=True)
    key: Mapped[str] = mapped_column(String(120))  # kind:step the finding is about
    kind: Mapped[str] = mapped_column(String(60))
    severity: Mapped[str] = mapped_column(String(20))
    step: Mapped[int | None] = mapped_column(Integer)
    message: Mapped[str] = mapped_column(Text)
    revision: Mapped[int] = mapped_column(Integer, default=1)
    silenced: Mapped[bool] = mapped_column(Boolean, default=False)
    resolved_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    deliveries: Mapped[list[AlertDelivery]] = relationship(
        back_populates="alert", cascade="all, delete-orphan", passive_deletes=True
    )


class AlertDelivery(Base):
    __tablename__ = "alert_delivery"
    __table_args__ = (UniqueConstraint("alert_id", "channel_id", "revision"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    alert_id: Mapped[int] = mapped_column(ForeignKey("alert.id", ondelete="CASCADE"), index=True)
    channel_id: Mapped[int] = mapped_column(
        ForeignKey("alert_channel.id", ondelete="CASCADE"), index=True
    )
    revision: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(10), index=True)  # pending, sending, sent, failed
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text)
    payload: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # a pending delivery is not claimed before this (retry backoff); the sweep re-enqueues
    # pending deliveries long past it, whose queue message was lost
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    alert: Mapped[Alert] = relationship(back_populates="deliveries")
    channel: Mapped[AlertChannel] = relationship()


class AlertSilence(Base):
    """No deliveries for this run's alerts until ``until`` (forever when null)."""

    __tablename__ = "alert_silence"

    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"), primary_key=True)
    until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

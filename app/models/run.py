"""Projects, runs, the process lifetimes (segments) of a run, and its events."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.models.base import Base, JSONType, UTCDateTime, utcnow


class Project(Base):
    __tablename__ = "project"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    runs: Mapped[list[Run]] = relationship(back_populates="project", passive_deletes=True)


class Run(Base):
    __tablename__ = "run"
    __table_args__ = (
        UniqueConstraint("project_id", "name"),
        Index("ix_run_project_id_updated_at", "project_id", "updated_at"),
        Index("ix_run_updated_at", "updated_at"),
        Index("ix_run_external_id", "external_id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(300))
    external_id: Mapped[str | None] = mapped_column(String(200))
    source_format: Mapped[str] = mapped_column(String(40))
    config: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    status: Mapped[str] = mapped_column(String(20), index=True)
    dataset_size: Mapped[int | None] = mapped_column(BigInteger)
    global_batch_size: Mapped[int | None] = mapped_column(Integer)
    first_step: Mapped[int | None] = mapped_column(Integer)
    last_step: Mapped[int | None] = mapped_column(Integer)
    num_steps: Mapped[int] = mapped_column(Integer, default=0)
    num_segments: Mapped[int] = mapped_column(Integer, default=0)
    source_sha256: Mapped[str | None] = mapped_column(String(64))
    # bumped whenever the run's rows are replaced: an analysis in parts checks it (analysis.py)
    data_generation: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    verdict: Mapped[str | None] = mapped_column(String(10), index=True)  # pass, warn, fail
    analysis: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    analyzed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    live: Mapped[bool] = mapped_column(Boolean, default=False)  # fed by a streaming logger
    refresh_requested_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    refreshed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    project: Mapped[Project] = relationship(back_populates="runs")
    segments: Mapped[list[Segment]] = relationship(
        back_populates="run",
        order_by="Segment.ordinal",
        cascade="all, delete-orphan",
        passive_deletes=True,
    )


class Segment(Base):
    """One process lifetime of a run: from a (re)start to its exit or crash."""

    __tablename__ = "segment"
    __table_args__ = (UniqueConstraint("run_id", "ordinal"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"))
    ordinal: Mapped[int] = mapped_column(Integer)
    start_step: Mapped[int | None] = mapped_column(Integer)
    end_step: Mapped[int | None] = mapped_column(Integer)
    resumed_from: Mapped[str | None] = mapped_column(String(500))
    resumed_from_checkpoint_id: Mapped[int | None] = mapped_column(
        ForeignKey("checkpoint.id", ondelete="SET NULL"), index=True
    )
    restored: Mapped[list[str] | None] = mapped_column(JSONType)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    exit_reason: Mapped[str | None] = mapped_column(String(100))
    num_metric_rows: Mapped[int] = mapped_column(Integer, default=0)
    num_sample_steps: Mapped[int] = mapped_column(Integer, default=0)

    run: Mapped[Run] = relationship(back_populates="segments")


class Event(Base):
    __tablename__ = "event"
    __table_args__ = (Index("ix_event_run_id_step", "run_id", "step"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"))
    segment_id: Mapped[int | None] = mapped_column(
        ForeignKey("segment.id", ondelete="CASCADE"), index=True
    )
    kind: Mapped[str] = mapped_column(String(60))
    step: Mapped[int | None] = mapped_column(Integer)
    occurred_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    payload: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    message: Mapped[str | None] = mapped_column(Text)

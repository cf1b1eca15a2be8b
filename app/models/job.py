"""Ingest jobs: one per source handed to Runwatch, with the raw source kept in the source store."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, JSONType, UTCDateTime, utcnow


class IngestJob(Base):
    __tablename__ = "ingest_job"
    __table_args__ = (
        Index("ix_ingest_job_state_created_at", "state", "created_at"),
        Index("ix_ingest_job_source_sha256", "source_sha256"),
        Index("ix_ingest_job_started_at", "started_at"),  # has any worker taken a job lately?
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    state: Mapped[str] = mapped_column(String(20))  # queued, running, succeeded, failed
    project: Mapped[str] = mapped_column(String(200))
    run_name: Mapped[str] = mapped_column(String(300))
    run_id: Mapped[int | None] = mapped_column(
        ForeignKey("run.id", ondelete="SET NULL"), index=True
    )
    source_name: Mapped[str] = mapped_column(String(500))
    source_kind: Mapped[str] = mapped_column(String(20))  # directory, file, tar, zip
    source_key: Mapped[str] = mapped_column(String(500))  # path inside the source store
    source_sha256: Mapped[str] = mapped_column(String(64))
    source_bytes: Mapped[int] = mapped_column(BigInteger)
    phase: Mapped[str | None] = mapped_column(String(40))
    progress_done: Mapped[int] = mapped_column(BigInteger, default=0)
    progress_total: Mapped[int] = mapped_column(BigInteger, default=0)
    counts: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    warnings: Mapped[list[str]] = mapped_column(JSONType, default=list)
    error: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=0)  # times a worker took it
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Recovery (app/services/job_claims.py, recovery.py): the worker that holds the job proves
    # it with its claim token and refreshes heartbeat_at while it works; a queued job's
    # heartbeat_at is when its message was last sent.
    claim_token: Mapped[str | None] = mapped_column(String(32))
    worker: Mapped[str | None] = mapped_column(String(200))  # host:pid holding the claim
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

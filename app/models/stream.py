"""Batches streamed by training-side loggers, remembered so a retried batch is applied once."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, UTCDateTime, utcnow


class StreamBatch(Base):
    __tablename__ = "stream_batch"
    __table_args__ = (UniqueConstraint("run_id", "logger", "batch"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"))
    logger: Mapped[str] = mapped_column(String(64))
    batch: Mapped[int] = mapped_column(Integer)
    records: Mapped[int] = mapped_column(Integer)
    received_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

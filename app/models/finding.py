"""What an analyzer concluded about a run, tied to a step range and optionally a segment."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, JSONType, UTCDateTime, utcnow


class Finding(Base):
    __tablename__ = "finding"
    __table_args__ = (Index("ix_finding_run_id_kind", "run_id", "kind"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"))
    segment_id: Mapped[int | None] = mapped_column(
        ForeignKey("segment.id", ondelete="SET NULL"), index=True
    )
    kind: Mapped[str] = mapped_column(String(60))
    severity: Mapped[str] = mapped_column(String(20))  # info, warning, error
    step: Mapped[int | None] = mapped_column(Integer)
    step_end: Mapped[int | None] = mapped_column(Integer)
    resume_from_step: Mapped[int | None] = mapped_column(Integer)
    segment: Mapped[int | None] = mapped_column(Integer)  # segment ordinal
    message: Mapped[str] = mapped_column(Text)
    evidence: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

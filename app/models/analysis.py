"""A large run's analysis in parts: one batch per analysis, one part per window of epochs.

The batch records the data generation of the run it analyses (``Run.data_generation``), so a
part computed from data that a newer ingest has since replaced is never merged. Parts hold
their epoch summaries until the merge; the batch counts finished parts, and the part that
brings the count to ``parts`` queues the merge.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Integer, LargeBinary, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.models.base import Base, JSONType, UTCDateTime, utcnow


class AnalysisBatch(Base):
    __tablename__ = "analysis_batch"
    __table_args__ = {"sqlite_autoincrement": True}  # ids in queued messages are never reused

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"), index=True)
    job_id: Mapped[int | None] = mapped_column(
        ForeignKey("ingest_job.id", ondelete="CASCADE"), index=True
    )
    claim_token: Mapped[str | None] = mapped_column(String(32))  # the job's, handed to the parts
    generation: Mapped[int] = mapped_column(Integer)  # the run's data_generation analysed
    plan: Mapped[dict[str, Any]] = mapped_column(JSONType)  # the EpochPlan's fields
    last_step: Mapped[int] = mapped_column(Integer)  # the trace's last logged step
    parts: Mapped[int] = mapped_column(Integer)
    parts_done: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    items: Mapped[list[AnalysisPart]] = relationship(
        back_populates="batch",
        order_by="AnalysisPart.ordinal",
        cascade="all, delete-orphan",
        passive_deletes=True,
    )


class AnalysisPart(Base):
    __tablename__ = "analysis_part"
    __table_args__ = (UniqueConstraint("batch_id", "ordinal"), {"sqlite_autoincrement": True})

    id: Mapped[int] = mapped_column(primary_key=True)
    batch_id: Mapped[int] = mapped_column(ForeignKey("analysis_batch.id", ondelete="CASCADE"))
    ordinal: Mapped[int] = mapped_column(Integer)
    first_epoch: Mapped[int] = mapped_column(Integer)
    last_epoch: Mapped[int] = mapped_column(Integer)
    summary: Mapped[bytes | None] = mapped_column(LargeBinary)  # app.store.summaries
    done_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    batch: Mapped[AnalysisBatch] = relationship(back_populates="items")

"""A large sample trace parsed in parts: one batch per ingest try, one part per byte range.

The batch belongs to the ingest job's claim (``claim_token``): parts of a try that lost its job
(the recovery sweep handed it on) are never used. Parsed parts are arrays in the shared source
store (``folder``); the rows only count them. The part that brings ``parts_done`` to ``parts``
sends the job back to the ingest queue, which reads the rest of the source and stores the run.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.models.base import Base, JSONType, UTCDateTime, utcnow


class IngestBatch(Base):
    __tablename__ = "ingest_batch"
    __table_args__ = {"sqlite_autoincrement": True}  # ids in queued messages are never reused

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("ingest_job.id", ondelete="CASCADE"), index=True)
    claim_token: Mapped[str] = mapped_column(String(32))  # the job's, handed to the parts
    file: Mapped[str] = mapped_column(String(1000))  # the trace's path in the source
    folder: Mapped[str] = mapped_column(String(200))  # under the source store: the parts' arrays
    parts: Mapped[int] = mapped_column(Integer)
    parts_done: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    items: Mapped[list[IngestPart]] = relationship(
        back_populates="batch",
        order_by="IngestPart.ordinal",
        cascade="all, delete-orphan",
        passive_deletes=True,
    )


class IngestPart(Base):
    __tablename__ = "ingest_part"
    __table_args__ = (UniqueConstraint("batch_id", "ordinal"), {"sqlite_autoincrement": True})

    id: Mapped[int] = mapped_column(primary_key=True)
    batch_id: Mapped[int] = mapped_column(ForeignKey("ingest_batch.id", ondelete="CASCADE"))
    ordinal: Mapped[int] = mapped_column(Integer)
    start: Mapped[int] = mapped_column(BigInteger)  # byte range of whole lines in the trace
    end: Mapped[int] = mapped_column(BigInteger)
    first_line: Mapped[int] = mapped_column(BigInteger)
    warnings: Mapped[list[Any] | None] = mapped_column(JSONType)
    done_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    batch: Mapped[IngestBatch] = relationship(back_populates="items")

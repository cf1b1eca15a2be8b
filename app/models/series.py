"""Metric series and sample traces, stored as compact little-endian array chunks.

A chunk holds up to a few thousand steps. ``superseded`` splits each run's history in two: the
effective history (the latest segment's value for every step) and the points that a later segment
logged again after a resume. Together they are exactly what the source logged.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    String,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base


class MetricSeries(Base):
    __tablename__ = "metric_series"
    __table_args__ = (UniqueConstraint("run_id", "key"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(300))
    source_key: Mapped[str] = mapped_column(String(300))
    kind: Mapped[str] = mapped_column(String(20))  # "train" or "eval"
    num_points: Mapped[int] = mapped_column(Integer)
    num_superseded: Mapped[int] = mapped_column(Integer, default=0)
    first_step: Mapped[int | None] = mapped_column(Integer)
    last_step: Mapped[int | None] = mapped_column(Integer)
    min_value: Mapped[float | None] = mapped_column(Float)
    max_value: Mapped[float | None] = mapped_column(Float)
    # A min/max-preserving downsample of the effective history for charts (long series only)
    preview: Mapped[bytes | None] = mapped_column(LargeBinary)


class MetricChunk(Base):
    __tablename__ = "metric_chunk"
    __table_args__ = (UniqueConstraint("series_id", "superseded", "seq"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    series_id: Mapped[int] = mapped_column(ForeignKey("metric_series.id", ondelete="CASCADE"))
    superseded: Mapped[bool] = mapped_column(Boolean)
    seq: Mapped[int] = mapped_column(Integer)
    first_step: Mapped[int] = mapped_column(Integer)
    last_step: Mapped[int] = mapped_column(Integer)
    count: Mapped[int] = mapped_column(Integer)
    steps: Mapped[bytes] = mapped_column(LargeBinary)  # int64
    values: Mapped[bytes] = mapped_column(LargeBinary)  # float64
    times: Mapped[bytes] = mapped_column(LargeBinary)  # float64 unix seconds, NaN when unknown
    segments: Mapped[bytes] = mapped_column(LargeBinary)  # uint16 segment ordinal


class SampleChunk(Base):
    """Dataset indices consumed by a run of consecutive logged steps."""

    __tablename__ = "sample_chunk"
    __table_args__ = (UniqueConstraint("run_id", "superseded", "seq"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"))
    superseded: Mapped[bool] = mapped_column(Boolean)
    seq: Mapped[int] = mapped_column(Integer)
    first_step: Mapped[int] = mapped_column(Integer)
    last_step: Mapped[int] = mapped_column(Integer)
    num_steps: Mapped[int] = mapped_column(Integer)
    num_ids: Mapped[int] = mapped_column(BigInteger)
    id_dtype: Mapped[str] = mapped_column(String(8))  # "<i4" or "<i8"
    steps: Mapped[bytes] = mapped_column(LargeBinary)  # int64, one per step
    counts: Mapped[bytes] = mapped_column(LargeBinary)  # int32, ids per step
    ids: Mapped[bytes] = mapped_column(LargeBinary)  # id_dtype, concatenated
    segments: Mapped[bytes] = mapped_column(LargeBinary)  # uint16, one per step

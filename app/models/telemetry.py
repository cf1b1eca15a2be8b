"""GPU telemetry: the nodes Runwatch pulls from, the series they expose, and compact storage.

Raw data is one row per successful scrape of a node: the ids of the series it answered and
their values as little-endian arrays (a failed scrape writes nothing, so a gap stays a gap).
Older data is rolled up into per-node blocks of per-minute and per-hour min/mean/max.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, JSONType, UTCDateTime, utcnow


class Node(Base):
    __tablename__ = "node"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    kind: Mapped[str] = mapped_column(String(20))  # dcgm, prometheus, agent
    url: Mapped[str] = mapped_column(String(1000))
    query: Mapped[str | None] = mapped_column(String(1000))  # prometheus: a label matcher
    interval_s: Mapped[float] = mapped_column(Float, default=5.0)
    timeout_s: Mapped[float] = mapped_column(Float, default=4.0)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    labels: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    last_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_success_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_error: Mapped[str | None] = mapped_column(Text)
    last_error_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    failures: Mapped[int] = mapped_column(Integer, default=0)  # consecutive
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class TelemetrySeries(Base):
    """One metric of one GPU, keyed on host + GPU UUID (not the node-local index)."""

    __tablename__ = "telemetry_series"
    __table_args__ = (
        UniqueConstraint("node_id", "host", "gpu", "metric"),
        Index("ix_telemetry_series_host", "host"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("node.id", ondelete="CASCADE"))
    host: Mapped[str] = mapped_column(String(200))
    gpu: Mapped[str] = mapped_column(String(200))  # UUID, or "index:N" when none is given
    gpu_index: Mapped[int | None] = mapped_column(Integer)
    model: Mapped[str | None] = mapped_column(String(200))
    metric: Mapped[str] = mapped_column(String(100))
    labels: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)


class TelemetryScrape(Base):
    __tablename__ = "telemetry_scrape"
    __table_args__ = (Index("ix_telemetry_scrape_node_id_at", "node_id", "at"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("node.id", ondelete="CASCADE"))
    at: Mapped[float] = mapped_column(Float)  # unix seconds
    series: Mapped[bytes] = mapped_column(LargeBinary)  # int32 series ids
    values: Mapped[bytes] = mapped_column(LargeBinary)  # float32, NaN = no value


class TelemetryRollup(Base):
    """Per-bucket min/mean/max of every series of a node over one window."""

    __tablename__ = "telemetry_rollup"
    __table_args__ = (
        UniqueConstraint("node_id", "resolution_s", "start"),
        Index("ix_telemetry_rollup_node_id_resolution_s_end", "node_id", "resolution_s", "end"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("node.id", ondelete="CASCADE"))
    resolution_s: Mapped[int] = mapped_column(Integer)
    start: Mapped[float] = mapped_column(Float)
    end: Mapped[float] = mapped_column(Float)
    series: Mapped[bytes] = mapped_column(LargeBinary)  # int32 series ids (S)
    times: Mapped[bytes] = mapped_column(LargeBinary)  # float64 bucket starts (B)
    mins: Mapped[bytes] = mapped_column(LargeBinary)  # float32 B x S
    means: Mapped[bytes] = mapped_column(LargeBinary)
    maxs: Mapped[bytes] = mapped_column(LargeBinary)

"""Reading metric series back from their chunks, whole or downsampled for charts."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.analysis.downsample import minmax_indices
from app.models import MetricChunk, MetricSeries
from app.store.arrays import FLOAT64, INT64, UINT16, unpack, unpack_points


@dataclass
class SeriesPoints:
    steps: np.ndarray
    values: np.ndarray
    times: np.ndarray
    segments: np.ndarray

    def take(self, index: np.ndarray) -> SeriesPoints:
        return SeriesPoints(
            self.steps[index], self.values[index], self.times[index], self.segments[index]
        )


def find_series(*, session: Session, run_id: int, key: str) -> MetricSeries | None:
    return session.scalars(
        select(MetricSeries).where(MetricSeries.run_id == run_id, MetricSeries.key == key)
    ).one_or_none()


def read_points(*, session: Session, series_id: int, superseded: bool = False) -> SeriesPoints:
    """The effective history sorted by step, or the superseded (re-logged) points in log order."""
    rows = session.execute(
        select(MetricChunk.steps, MetricChunk.values, MetricChunk.times, MetricChunk.segments)
        .where(MetricChunk.series_id == series_id, MetricChunk.superseded == superseded)
        .order_by(MetricChunk.seq)
    ).all()
    if not rows:
        empty = np.zeros(0)
        return SeriesPoints(empty.astype(np.int64), empty, empty, empty.astype(np.uint16))
    return SeriesPoints(
        steps=np.concatenate([unpack(r.steps, INT64) for r in rows]),
        values=np.concatenate([unpack(r.values, FLOAT64) for r in rows]),
        times=np.concatenate([unpack(r.times, FLOAT64) for r in rows]),
        segments=np.concatenate([unpack(r.segments, UINT16) for r in rows]),
    )


def display_points(*, session: Session, series: MetricSeries, max_points: int) -> SeriesPoints:
    """At most ``max_points`` of the effective history for a chart: from the stored preview of
    a long series when it is fine enough, so a chart's cost does not grow with the run."""
    if series.preview is not None and 0 < max_points <= len(series.preview) // 18:
        steps, values, segments = unpack_points(series.preview)
        preview = SeriesPoints(steps, values, np.full(steps.size, np.nan), segments)
        return downsample(preview, max_points)
    return downsample(read_points(session=session, series_id=series.id), max_points)


def downsample(points: SeriesPoints, max_points: int) -> SeriesPoints:
    """At most ``max_points`` points; every bucket keeps its minimum and maximum."""
    return points.take(minmax_indices(points.values, max_points))

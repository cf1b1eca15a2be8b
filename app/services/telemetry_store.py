"""Storing and reading GPU telemetry: raw scrapes, rollups and retention."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from app.analysis.downsample import minmax_indices
from app.ingest.errors import printable
from app.models import Node, TelemetryRollup, TelemetryScrape, TelemetrySeries
from app.store.arrays import FLOAT64, INT32, pack, unpack
from app.telemetry.samples import GpuSample, Scrape, series_key

FLOAT32 = "<f4"
MINUTE, HOUR = 60, 3600


@dataclass
class Points:
    times: np.ndarray  # float64 unix seconds, sorted
    values: np.ndarray  # float64 (means for rolled-up data), NaN = no value
    resolution_s: int  # 0 for raw scrapes


def series_ids(session: Session, node: Node, samples: Iterable[GpuSample]) -> list[int]:
    """The id of each sample's series, creating series on first sight."""
    known = {
        (s.host, s.gpu, s.metric): s
        for s in session.scalars(select(TelemetrySeries).where(TelemetrySeries.node_id == node.id))
    }
    rows = []
    for sample in samples:
        key = _storable(series_key(sample))
        labels = _labels(sample.labels)
        row = known.get(key)
        if row is None:
            row = known[key] = TelemetrySeries(
                node_id=node.id,
                host=key[0],
                gpu=key[1],
                gpu_index=sample.gpu_index if _int32(sample.gpu_index) else None,
                model=None if sample.model is None else printable(sample.model, _MODEL),
                metric=key[2],
                labels=labels,
            )
            session.add(row)
        elif labels and row.labels != labels:
            row.labels = labels  # e.g. a pod was assigned to an idle GPU
        rows.append(row)
    session.flush()  # new series in one batch
    return [row.id for row in rows]


def _length(column: Any) -> int:
    return int(column.type.length)


_HOST, _GPU, _METRIC, _MODEL = (
    _length(TelemetrySeries.__table__.c[column]) for column in ("host", "gpu", "metric", "model")
)


def _storable(key: tuple[str, str, str]) -> tuple[str, str, str]:
    """A series key as its columns hold it: no NUL or lone surrogate (an exporter's labels are
    any text), within each column's length."""
    host, gpu, metric = key
    return printable(host, _HOST), printable(gpu, _GPU), printable(metric, _METRIC)


def _labels(labels: dict[str, str]) -> dict[str, str]:
    return {printable(k, 200): printable(v, 1000) for k, v in labels.items()}


def _int32(value: int | None) -> bool:
    return value is not None and -(2**31) <= value < 2**31


def store_scrape(session: Session, node: Node, scrape: Scrape, at: float) -> int:
    """One raw row per distinct sample time (the scrape time when the source gives none).
    Returns the number of values stored."""
    if not scrape.samples:
        return 0
    ids = series_ids(session, node, scrape.samples)
    by_time: dict[float, tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
    for sid, sample in zip(ids, scrape.samples, strict=True):
        when = sample.timestamp if sample.timestamp is not None else at
        bucket = by_time[when]
        bucket[0].append(sid)
        bucket[1].append(math.nan if sample.value is None else sample.value)
    rows = [
        {
            "node_id": node.id,
            "at": when,
            "series": pack(np.asarray(sids), INT32),
            "values": pack(np.asarray(values), FLOAT32),
        }
        for when, (sids, values) in sorted(by_time.items())
    ]
    session.execute(insert(TelemetryScrape), rows)
    return len(ids)


def read_points(session: Session, series: TelemetrySeries, start: float, end: float) -> Points:
    """Raw points of one series in ``[start, end]``; where raw data was already rolled up and
    removed, per-minute (then per-hour) means fill in."""
    rows = session.execute(
        select(TelemetryScrape.at, TelemetryScrape.series, TelemetryScrape.values)
        .where(
            TelemetryScrape.node_id == series.node_id,
            TelemetryScrape.at >= start,
            TelemetryScrape.at <= end,
        )
        .order_by(TelemetryScrape.at)
    ).all()
    times, values = _column(rows, series.id)
    first_raw = times[0] if times.size else end
    if first_raw - start > MINUTE:
        older = _rollup_points(session, series, start, first_raw)
        if older.times.size:
            return Points(
                np.concatenate([older.times, times]),
                np.concatenate([older.values, values]),
                older.resolution_s,
            )
    return Points(times, values, 0)


def _column(rows: Sequence[Any], series_id: int) -> tuple[np.ndarray, np.ndarray]:
    times, values = [], []
    for at, blob_ids, blob_values in rows:
        hit = np.flatnonzero(unpack(blob_ids, INT32) == series_id)
        if hit.size:
            times.append(at)
            values.append(float(unpack(blob_values, FLOAT32)[hit[0]]))
    return np.asarray(times, dtype=np.float64), np.asarray(values, dtype=np.float64)


def _rollup_points(session: Session, series: TelemetrySeries, start: float, end: float) -> Points:
    for resolution in (MINUTE, HOUR):
        rows = session.scalars(
            select(TelemetryRollup)
            .where(
                TelemetryRollup.node_id == series.node_id,
                TelemetryRollup.resolution_s == resolution,
                TelemetryRollup.end >= start,
                TelemetryRollup.start <= end,
            )
            .order_by(TelemetryRollup.start)
        ).all()
        times, values = [], []
        for row in rows:
            ids = unpack(row.series, INT32)
            hit = np.flatnonzero(ids == series.id)
            if not hit.size:
                continue
            bucket_times = unpack(row.times, FLOAT64)
            means = unpack(row.means, FLOAT32).reshape(bucket_times.size, ids.size)[:, hit[0]]
            keep = (bucket_times >= start) & (bucket_times <= end)
            times.append(bucket_times[keep])
            values.append(means[keep].astype(np.float64))
        if times:
            return Points(np.concatenate(times), np.concatenate(values), resolution)
    return Points(np.zeros(0), np.zeros(0), MINUTE)


def roll_up(session: Session, node_id: int, resolution: int, start: float) -> bool:
    """Build the rollup of one window (an hour of minutes, or a day of hours) from raw scrapes
    (minutes) or minute rollups (hours). Returns whether there was data."""
    span = HOUR if resolution == MINUTE else 24 * HOUR
    end = start + span
    if resolution == MINUTE:
        rows = session.execute(
            select(TelemetryScrape.at, TelemetryScrape.series, TelemetryScrape.values).where(
                TelemetryScrape.node_id == node_id,
                TelemetryScrape.at >= start,
                TelemetryScrape.at < end,
            )
        ).all()
        points = [(at, unpack(s, INT32), unpack(v, FLOAT32)) for at, s, v in rows]
    else:
        minute_rows = session.scalars(
            select(TelemetryRollup).where(
                TelemetryRollup.node_id == node_id,
                TelemetryRollup.resolution_s == MINUTE,
                TelemetryRollup.start >= start,
                TelemetryRollup.start < end,
            )
        ).all()
        points = []
        for row in minute_rows:
            ids, times = unpack(row.series, INT32), unpack(row.times, FLOAT64)
            means = unpack(row.means, FLOAT32).reshape(times.size, ids.size)
            points.extend((float(t), ids, means[i]) for i, t in enumerate(times))
    if not points:
        return False
    all_ids = np.unique(np.concatenate([ids for _, ids, _ in points]))
    buckets = np.arange(start, end, resolution, dtype=np.float64)
    sums = np.zeros((buckets.size, all_ids.size))
    counts = np.zeros((buckets.size, all_ids.size))
    mins = np.full((buckets.size, all_ids.size), np.inf)
    maxs = np.full((buckets.size, all_ids.size), -np.inf)
    for at, ids, vals in points:
        b = int((at - start) // resolution)
        cols = np.searchsorted(all_ids, ids)
        ok = ~np.isnan(vals)
        cols, vals = cols[ok], vals[ok].astype(np.float64)
        sums[b, cols] += vals
        counts[b, cols] += 1
        mins[b, cols] = np.minimum(mins[b, cols], vals)
        maxs[b, cols] = np.maximum(maxs[b, cols], vals)
    filled = counts.sum(axis=1) > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    mins = np.where(counts > 0, mins, np.nan)
    maxs = np.where(counts > 0, maxs, np.nan)
    session.execute(
        delete(TelemetryRollup).where(
            TelemetryRollup.node_id == node_id,
            TelemetryRollup.resolution_s == resolution,
            TelemetryRollup.start == start,
        )
    )
    session.add(
        TelemetryRollup(
            node_id=node_id,
            resolution_s=resolution,
            start=start,
            end=end,
            series=pack(all_ids, INT32),
            times=pack(buckets[filled], FLOAT64),
            mins=pack(mins[filled], FLOAT32),
            means=pack(means[filled], FLOAT32),
            maxs=pack(maxs[filled], FLOAT32),
        )
    )
    return True


@dataclass(frozen=True)
class Retention:
    raw_days: float = 7.0
    minute_days: float = 90.0
    hour_days: float = 730.0


def compact(session: Session, now: float, retention: Retention) -> dict[str, int]:
    """Roll complete hours of raw data into minutes and complete days of minutes into hours,
    then drop what is past retention. Safe to run at any time, repeatedly."""
    done = {"minute_rollups": 0, "hour_rollups": 0}
    for node_id in session.scalars(select(Node.id)).all():
        done["minute_rollups"] += _roll_pending(session, node_id, MINUTE, now)
        done["hour_rollups"] += _roll_pending(session, node_id, HOUR, now)
    day = 24 * HOUR
    done["raw_deleted"] = _deleted(
        session.execute(
            delete(TelemetryScrape).where(TelemetryScrape.at < now - retention.raw_days * day)
        )
    )
    for resolution, days in ((MINUTE, retention.minute_days), (HOUR, retention.hour_days)):
        done[f"rollups_deleted_{resolution}s"] = _deleted(
            session.execute(
                delete(TelemetryRollup).where(
                    TelemetryRollup.resolution_s == resolution,
                    TelemetryRollup.end < now - days * day,
                )
            )
        )
    return done


def _deleted(result: Any) -> int:
    return int(getattr(result, "rowcount", 0) or 0)


def _roll_pending(session: Session, node_id: int, resolution: int, now: float) -> int:
    span = HOUR if resolution == MINUTE else 24 * HOUR
    last = session.scalar(
        select(TelemetryRollup.start)
        .where(TelemetryRollup.node_id == node_id, TelemetryRollup.resolution_s == resolution)
        .order_by(TelemetryRollup.start.desc())
        .limit(1)
    )
    if last is not None:
        start = last + span
    else:
        source = (
            select(TelemetryScrape.at).where(TelemetryScrape.node_id == node_id)
            if resolution == MINUTE
            else select(TelemetryRollup.start).where(
                TelemetryRollup.node_id == node_id, TelemetryRollup.resolution_s == MINUTE
            )
        )
        first = session.scalar(source.order_by(source.selected_columns[0]).limit(1))
        if first is None:
            return 0
        start = math.floor(first / span) * span
    made = 0
    while start + span <= now - span:  # only windows complete for a whole window already
        made += roll_up(session, node_id, resolution, start)
        start += span
    return made


def series_payload(
    session: Session, series: TelemetrySeries, start: float, end: float, max_points: int
) -> dict[str, Any]:
    points = read_points(session, series, start, end)
    times, values = points.times, points.values
    total = int(times.size)
    if max_points and total > max_points:
        keep = minmax_indices(values, max_points)
        times, values = times[keep], values[keep]
    return {
        "host": series.host,
        "gpu": series.gpu,
        "gpu_index": series.gpu_index,
        "model": series.model,
        "labels": series.labels or {},
        "resolution_s": points.resolution_s,
        "num_points": total,
        "times": times,
        "values": [None if np.isnan(v) else float(v) for v in values.tolist()],
    }

"""A run's stored sample trace read back from its ``sample_chunk`` rows: whole, one step window
(what an analysis part reads), or paged (the per-step arrays in memory and the ids read from
their chunks by position when an analyzer asks, a few chunks kept)."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.analysis.model import Trace
from app.models import SampleChunk
from app.store.arrays import INT32, INT64, UINT16, unpack

CACHED_CHUNKS = 8  # of up to 1 Mi ids each (run_store.SAMPLE_CHUNK_IDS)


def read_trace(session: Session, run_id: int, *, superseded: bool) -> Trace | None:
    rows = session.execute(
        select(
            SampleChunk.steps,
            SampleChunk.counts,
            SampleChunk.ids,
            SampleChunk.segments,
            SampleChunk.id_dtype,
        )
        .where(SampleChunk.run_id == run_id, SampleChunk.superseded == superseded)
        .order_by(SampleChunk.seq)
    ).all()
    if not rows:
        return None
    return Trace(
        steps=np.concatenate([unpack(r.steps, INT64) for r in rows]),
        counts=np.concatenate([unpack(r.counts, INT32) for r in rows]).astype(np.int64),
        ids=np.concatenate([unpack(r.ids, r.id_dtype) for r in rows]).astype(np.int64, copy=False),
        segments=np.concatenate([unpack(r.segments, UINT16) for r in rows]),
    )


def count_ids(session: Session, run_id: int) -> int:
    """Ids in the run's effective trace."""
    total = session.scalar(
        select(func.coalesce(func.sum(SampleChunk.num_ids), 0)).where(
            SampleChunk.run_id == run_id, SampleChunk.superseded.is_(False)
        )
    )
    return int(total or 0)


def read_window(session: Session, run_id: int, first_step: int, last_step: int) -> Trace:
    """The effective trace's rows logged in ``[first_step, last_step]``, reading only the chunks
    that overlap the window."""
    rows = session.execute(
        select(
            SampleChunk.steps,
            SampleChunk.counts,
            SampleChunk.ids,
            SampleChunk.segments,
            SampleChunk.id_dtype,
        )
        .where(
            SampleChunk.run_id == run_id,
            SampleChunk.superseded.is_(False),
            SampleChunk.first_step <= last_step,
            SampleChunk.last_step >= first_step,
        )
        .order_by(SampleChunk.seq)
    ).all()
    if not rows:
        empty = np.zeros(0, dtype=np.int64)
        return Trace(empty, empty, empty, empty.astype(np.uint16))
    steps = np.concatenate([unpack(r.steps, INT64) for r in rows])
    counts = np.concatenate([unpack(r.counts, INT32) for r in rows]).astype(np.int64)
    ids = np.concatenate([unpack(r.ids, r.id_dtype) for r in rows])
    lo = int(np.searchsorted(steps, first_step, side="left"))
    hi = int(np.searchsorted(steps, last_step, side="right"))
    start, end = int(counts[:lo].sum()), int(counts[:hi].sum())
    return Trace(
        steps=steps[lo:hi],
        counts=counts[lo:hi],
        ids=ids[start:end].astype(np.int64),
        segments=np.concatenate([unpack(r.segments, UINT16) for r in rows])[lo:hi],
    )


def read_paged(session: Session, run_id: int) -> Trace | None:
    """The effective trace with its ids left in storage (``Trace.paged``). Valid while
    ``session`` is open."""
    rows = session.execute(
        select(
            SampleChunk.id,
            SampleChunk.num_ids,
            SampleChunk.steps,
            SampleChunk.counts,
            SampleChunk.segments,
        )
        .where(SampleChunk.run_id == run_id, SampleChunk.superseded.is_(False))
        .order_by(SampleChunk.seq)
    ).all()
    if not rows:
        return None
    reader = StoredIds(session, [r.id for r in rows], [int(r.num_ids) for r in rows])
    return Trace.paged(
        steps=np.concatenate([unpack(r.steps, INT64) for r in rows]),
        counts=np.concatenate([unpack(r.counts, INT32) for r in rows]).astype(np.int64),
        segments=np.concatenate([unpack(r.segments, UINT16) for r in rows]),
        reader=reader,
    )


class StoredIds:
    """``IdReader`` over a trace's chunks: a read loads the chunks it overlaps, and the last
    ``CACHED_CHUNKS`` stay in memory (analyzers walk steps one at a time)."""

    def __init__(self, session: Session, chunk_ids: list[int], sizes: list[int]) -> None:
        self._session = session
        self._chunks = chunk_ids
        self._starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._max: int | None = None
        self.ids_loaded = 0  # ids read from the database, for measurements

    @property
    def size(self) -> int:
        return int(self._starts[-1])

    def read(self, start: int, end: int) -> np.ndarray:
        start, end = max(start, 0), min(end, self.size)
        if end <= start:
            return np.zeros(0, dtype=np.int64)
        first = int(np.searchsorted(self._starts, start, side="right")) - 1
        last = int(np.searchsorted(self._starts, end - 1, side="right")) - 1
        parts = []
        for k in range(first, last + 1):
            base = int(self._starts[k])
            parts.append(self._chunk(k)[max(start - base, 0) : end - base])
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def max_id(self) -> int:
        if self._max is None:
            self._max = max(
                (self._load(k).max(initial=-1) for k in range(len(self._chunks))), default=-1
            )
        return int(self._max)

    def _chunk(self, k: int) -> np.ndarray:
        ids = self._cache.get(k)
        if ids is None:
            ids = self._load(k)
            self._cache[k] = ids
            if len(self._cache) > CACHED_CHUNKS:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(k)
        return ids

    def _load(self, k: int) -> np.ndarray:
        row = self._session.execute(
            select(SampleChunk.ids, SampleChunk.id_dtype).where(SampleChunk.id == self._chunks[k])
        ).one()
        ids = unpack(row.ids, row.id_dtype).astype(np.int64)
        self.ids_loaded += int(ids.size)
        return ids

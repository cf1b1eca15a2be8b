"""TensorBoard ``Event`` records turned into scalar points, in both styles: ``simple_value`` and
one-element tensors (:mod:`app.ingest.tf_proto` reads the tensors). Only the fields a scalar
reader needs are decoded; everything else is skipped by wire type:

    Event:          wall_time 1 (double), step 2 (int64), summary 5, session_log 7
    SessionLog:     status 1 (START = 1: a writer (re)started here)
    Summary:        value 1 (repeated)
    Summary.Value:  tag 1, simple_value 2 (float), tensor 8 (TensorProto),
                    metadata 9 (SummaryMetadata)
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.ingest.errors import IngestError
from app.ingest.tf_proto import (
    F32,
    Malformed,
    Payload,
    fields,
    plugin_name,
    signed64,
    skip_field,
    tensor_scalar,
    varint,
)
from app.ingest.tfrecord import HEADER_BYTES, RecordBlock

START = 1  # SessionLog.START
HPARAMS = "hparams"

_F64 = struct.Struct("<d")


@dataclass
class TagTable:
    """Tags of all files of a run; a tag logged as a tensor has its own id (kept only when the
    tag's metadata names the ``scalars`` plugin, as TensorBoard does)."""

    names: list[str] = field(default_factory=list)
    tensor: list[bool] = field(default_factory=list)
    plugins: dict[str, str] = field(default_factory=dict)
    _ids: dict[tuple[bytes, bool], int] = field(default_factory=dict)

    def id(self, tag: bytes, tensor: bool) -> int:
        key = (tag, tensor)
        found = self._ids.get(key)
        if found is None:
            found = self._ids[key] = len(self.names)
            self.names.append(tag.decode("utf-8", "replace"))
            self.tensor.append(tensor)
        return found


@dataclass
class SessionMark:
    """A ``SessionLog`` START: the writer restarted; points from ``point`` on come after it."""

    point: int
    step: int
    time: float
    record: int


@dataclass
class ScalarLog:
    """The scalar points of one event file in record order, and what else the file told.
    Points of the block being decoded are in lists; earlier blocks' are numpy chunks."""

    steps: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    tags: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = field(
        default_factory=list
    )
    flushed: int = 0  # points in chunks
    marks: list[SessionMark] = field(default_factory=list)
    hparams: bool = False  # holds hyperparameter summaries (the ``hparams`` plugin)
    first_time: float = math.nan
    last_time: float = math.nan
    records: int = 0

    def flush(self) -> None:
        if not self.steps:
            return
        self.chunks.append(
            (
                np.asarray(self.steps, dtype=np.int64),
                np.asarray(self.times, dtype=np.float64),
                np.asarray(self.tags, dtype=np.int64),
                np.asarray(self.values, dtype=np.float64),
            )
        )
        self.flushed += len(self.steps)
        for points in (self.steps, self.times, self.tags, self.values):
            points.clear()

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(steps, times, tags, values)`` of all points."""
        self.flush()
        if not self.chunks:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty.astype(np.float64), empty, empty.astype(np.float64)
        steps, times, tags, values = (np.concatenate(c) for c in zip(*self.chunks, strict=True))
        self.chunks = [(steps, times, tags, values)]
        return steps, times, tags, values


_Cache = dict[bytes, tuple[int, Callable[..., tuple[Any, ...]]]]


class EventDecoder:
    """Turns records into scalar points. A ``Summary.Value`` whose bytes, but for its number,
    repeat an earlier one is decoded from a cache keyed by those bytes: the layout (``suffix``
    bytes after a ``width``-byte number) is learned from a full decode of the first such value."""

    def __init__(self, tags: TagTable) -> None:
        self.tags = tags
        self._shapes: list[tuple[int, int, _Cache]] = []

    def decode(self, block: RecordBlock, out: ScalarLog, name: str) -> None:
        """Append the block's scalar points to ``out``; bad bytes are an error naming the record."""
        try:
            self._decode(block, out)
            out.flush()
        except (Malformed, IndexError, struct.error) as exc:
            raise IngestError(
                f"record {out.records + 1}: not a valid Event ({exc})", file=name
            ) from None

    def _decode(self, block: RecordBlock, out: ScalarLog) -> None:
        data = block.data
        add_step, add_time = out.steps.append, out.times.append
        add_tag, add_value = out.tags.append, out.values.append
        shapes = self._shapes
        unpack_d = _F64.unpack_from
        first, last = out.first_time, out.last_time
        for start, length in zip(block.offsets, block.lengths, strict=True):
            p = start + HEADER_BYTES
            end = p + length
            wall = 0.0
            step = 0
            s0 = s1 = log0 = log1 = -1
            while p < end:
                key = data[p]
                if key == 0x09:
                    wall = unpack_d(data, p + 1)[0]
                    p += 9
                elif key == 0x10:
                    b = data[p + 1]
                    if b < 0x80:
                        step = b
                        p += 2
                    elif data[p + 2] < 0x80:
                        step = (b & 0x7F) | (data[p + 2] << 7)
                        p += 3
                    elif data[p + 3] < 0x80:
                        step = (b & 0x7F) | ((data[p + 2] & 0x7F) << 7) | (data[p + 3] << 14)
                        p += 4
                    else:
                        step, p = varint(data, p + 1)
                        step = signed64(step)
                elif key == 0x2A or key == 0x3A:
                    b = data[p + 1]
                    if b < 0x80:
                        q = p + 2
                    else:
                        b, q = varint(data, p + 1)
                    p = q + b
                    if key == 0x2A:
                        s0, s1 = q, p
                    else:
                        log0, log1 = q, p
                else:
                    p = skip_field(data, p, end)
            if p != end:
                raise Malformed("a field runs past the end of the record")
            if first != first:
                first = wall
            if not wall <= last:
                last = wall
            if log0 >= 0:
                self._session_log(data, log0, log1, step, wall, out)
            q = s0
            while q < s1:
                if data[q] != 0x0A:
                    q = skip_field(data, q, s1)
                    continue
                vl = data[q + 1]
                if vl < 0x80:
                    v0 = q + 2
                else:
                    vl, v0 = varint(data, q + 1)
                v1 = v0 + vl
                if v1 > s1:
                    raise Malformed("a summary value runs past the end of its summary")
                q = v1
                for suffix, width, cache in shapes:
                    cut = v1 - suffix - width
                    if cut <= v0:
                        continue
                    lookup = data[v0:cut] + data[v1 - suffix : v1] if suffix else data[v0:cut]
                    hit = cache.get(lookup)
                    if hit is not None:
                        add_step(step)
                        add_time(wall)
                        add_tag(hit[0])
                        add_value(float(hit[1](data, cut)[0]))
                        break
                else:
                    self._value(data, v0, v1, step, wall, out)
            out.records += 1
        out.first_time, out.last_time = first, last

    def _session_log(
        self, data: bytes, start: int, end: int, step: int, wall: float, out: ScalarLog
    ) -> None:
        for number, wire, value, _ in fields(data, start, end):
            if number == 1 and wire == 0 and value == START:
                out.marks.append(
                    SessionMark(out.flushed + len(out.steps), step, wall, out.records + 1)
                )

    def _value(self, data: bytes, v0: int, v1: int, step: int, wall: float, out: ScalarLog) -> None:
        """Full decode of one ``Summary.Value``; learns its layout when it can be cached."""
        tag = b""
        kind = ""
        span = (0, 0)
        for number, wire, a, b in fields(data, v0, v1):
            if number == 1 and wire == 2:
                tag = data[a:b]
            elif number == 2 and wire == 5:
                kind, span = "simple", (a, b)
            elif number == 8 and wire == 2:
                kind, span = "tensor", (a, b)
            elif number in (3, 4, 5, 6):
                kind = "other"  # image, histogram, audio
            elif number == 9 and wire == 2:
                plugin = plugin_name(data, a, b)
                if plugin is not None:
                    out.hparams |= plugin == HPARAMS
                    self.tags.plugins.setdefault(tag.decode("utf-8", "replace"), plugin)
        if kind == "simple":
            simple = float(F32.unpack_from(data, span[0])[0])
            payload: Payload | None = Payload(simple, span[0], "<f")
        elif kind == "tensor":
            payload = tensor_scalar(data, *span)
        else:
            return
        if payload is None:
            return
        tag_id = self.tags.id(tag, kind == "tensor")
        out.steps.append(step)
        out.times.append(wall)
        out.tags.append(tag_id)
        out.values.append(payload.value)
        if payload.offset >= 0:
            self._learn(data, v0, v1, payload, tag_id)

    def _learn(self, data: bytes, v0: int, v1: int, payload: Payload, tag_id: int) -> None:
        unpack = struct.Struct(payload.fmt).unpack_from
        width = struct.calcsize(payload.fmt)
        suffix = v1 - payload.offset - width
        key = data[v0 : payload.offset] + data[v1 - suffix : v1]
        for known_suffix, known_width, cache in self._shapes:
            if (known_suffix, known_width) == (suffix, width):
                cache[key] = (tag_id, unpack)
                return
        self._shapes.append((suffix, width, {key: (tag_id, unpack)}))

"""TFRecord framing and the protobuf wire format of TensorBoard ``Event`` files, for scalars.

A record is ``u64 length | u32 masked crc32c(length) | data | u32 masked crc32c(data)``, all
little-endian; ``data`` is one serialized ``Event``. Pure Python and numpy: no tensorflow,
tensorboard or protobuf at run time. Checksums are computed for a whole block of records at once
(numpy, one byte position of every record per step), so checking them stays cheap.

Only the fields a scalar reader needs are decoded; everything else is skipped by wire type:

    Event:          wall_time 1 (double), step 2 (int64), summary 5, session_log 7
    SessionLog:     status 1 (START = 1: a writer (re)started here)
    Summary:        value 1 (repeated)
    Summary.Value:  tag 1, simple_value 2 (float), tensor 8,
                    metadata 9 (plugin_data 1: plugin_name 1)
    TensorProto:    dtype 1, tensor_shape 2 (dim 2: size 1), tensor_content 4, half_val 13,
                    float_val 5, double_val 6, int_val 7, int64_val 10, bool_val 11,
                    uint32_val 16, uint64_val 17 (repeated numbers packed or not)
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np

from app.ingest.errors import IngestError

HEADER_BYTES = 12  # u64 length + u32 crc of the length
FOOTER_BYTES = 4
BLOCK_BYTES = 8 << 20
START = 1  # SessionLog.START
HPARAMS = "hparams"

_MASK_DELTA = 0xA282EAD8
_U64 = struct.Struct("<Q")
_F64 = struct.Struct("<d")
_F32 = struct.Struct("<f")


def _crc_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(0x82F63B78), table >> 1)
    return table.astype(np.uint32)


_TABLE = _crc_table()
_TABLE_LIST: list[int] = _TABLE.tolist()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of ``data``; pure Python, for short inputs."""
    crc = 0xFFFFFFFF
    table = _TABLE_LIST
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """The checksum TFRecord stores: the CRC rotated right by 15 bits plus a constant."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def _shift_tables(chunk: int) -> np.ndarray:
    """Tables applying the CRC register update of ``chunk`` zero bytes (it is linear)."""
    reg = np.arange(256, dtype=np.uint32)[None, :] << (8 * np.arange(4, dtype=np.uint32))[:, None]
    reg = reg.reshape(-1)
    for _ in range(chunk):
        reg = _TABLE[reg & 0xFF] ^ (reg >> 8)
    return reg.reshape(4, 256)


CHUNK = 256
_SHIFT = _shift_tables(CHUNK)


def _update(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, reg: np.ndarray) -> None:
    """Feed ``buf[starts[i] : starts[i] + lengths[i]]`` into register ``reg[i]``, in place."""
    if starts.size == 0:
        return
    order = np.argsort(-lengths, kind="stable")
    at, length = starts[order], lengths[order]
    r = reg[order]
    longest = int(length[0])
    active = np.searchsorted(-length, -np.arange(longest), side="left")
    byte = np.empty(r.size, dtype=np.uint8)
    low = np.empty(r.size, dtype=np.uint32)
    for j in range(longest):
        k = int(active[j])
        c, b, t = r[:k], byte[:k], low[:k]
        np.take(buf, at[:k], out=b)
        np.bitwise_xor(c, b, out=t)
        np.bitwise_and(t, 0xFF, out=t)
        np.take(_TABLE, t, out=t)
        np.right_shift(c, 8, out=c)
        np.bitwise_xor(c, t, out=c)
        at[:k] += 1
    reg[order] = r


def crc32c_spans(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """CRC-32C of many spans of ``buf`` at once (uint32 per span).

    A span is split into a head of 1..CHUNK bytes and whole CHUNK-byte pieces. The CRCs of all
    pieces are computed in one pass, then folded into their span's register with the shift of
    CHUNK zero bytes (the CRC is affine in its register), so a long record costs few steps."""
    reg = np.full(starts.size, 0xFFFFFFFF, dtype=np.uint32)
    full = np.maximum(lengths - 1, 0) // CHUNK
    head = lengths - full * CHUNK
    _update(buf, starts, head, reg)
    owners = np.flatnonzero(full)
    if owners.size:
        counts = full[owners]
        first = np.cumsum(counts) - counts
        owner = np.repeat(owners, counts)
        piece = np.arange(int(counts.sum())) - np.repeat(first, counts)
        piece_start = starts[owner] + head[owner] + piece * CHUNK
        parts = np.zeros(piece_start.size, dtype=np.uint32)
        for j in range(CHUNK):
            parts = _TABLE[(parts ^ buf[piece_start + j]) & 0xFF] ^ (parts >> 8)
        order = np.argsort(-counts, kind="stable")
        recs, cnt, base = owners[order], counts[order], first[order]
        r = reg[recs]
        active = np.searchsorted(-cnt, -np.arange(int(cnt[0])), side="left")
        for m in range(int(cnt[0])):
            k = int(active[m])
            c = r[:k]
            shifted = (
                _SHIFT[0][c & 0xFF]
                ^ _SHIFT[1][(c >> 8) & 0xFF]
                ^ _SHIFT[2][(c >> 16) & 0xFF]
                ^ _SHIFT[3][c >> 24]
            )
            r[:k] = shifted ^ parts[base[:k] + m]
        reg[recs] = r
    return reg ^ np.uint32(0xFFFFFFFF)


def _masked(crc: np.ndarray) -> np.ndarray:
    return ((crc >> 15) | (crc << 17)) + np.uint32(_MASK_DELTA)


def _stored(buf: np.ndarray, at: np.ndarray) -> np.ndarray:
    b = [buf[at + i].astype(np.uint32) for i in range(4)]
    return b[0] | (b[1] << 8) | (b[2] << 16) | (b[3] << 24)


@dataclass
class RecordBlock:
    """Complete, checked records: record ``i`` is ``data[offsets[i] + 12 :][: lengths[i]]``."""

    data: bytes
    offsets: list[int]
    lengths: list[int]
    first: int  # number of records of the file before this block


class RecordReader:
    """Reads a TFRecord stream block by block. Length checksums are always checked, data
    checksums when ``verify_data``; a mismatch is an error naming the record. A file that ends
    inside its last record (a crashed or live writer) is not: ``truncated`` then says why."""

    def __init__(
        self,
        stream: IO[bytes],
        name: str,
        *,
        verify_data: bool = True,
        block_bytes: int = BLOCK_BYTES,
        on_bytes: Callable[[int], None] | None = None,
    ) -> None:
        self.stream = stream
        self.name = name
        self.verify_data = verify_data
        self.block_bytes = block_bytes
        self.on_bytes = on_bytes
        self.records = 0
        self.truncated: str | None = None

    def blocks(self) -> Iterator[RecordBlock]:
        buf = b""
        base = 0  # file offset of buf[0]
        need = 0
        zeros = 0  # length of an all-zero tail (space a crash allocated but never wrote)
        while chunk := self.stream.read(max(need, self.block_bytes)):
            if self.on_bytes is not None:
                self.on_bytes(len(chunk))
            if zeros:
                if any(chunk):
                    raise self._corrupt("length", base)
                zeros += len(chunk)
                continue
            buf = buf + chunk if buf else chunk
            offsets, lengths, pos = _scan(buf)
            good = self._check(buf, offsets, lengths, base)
            if good:
                yield RecordBlock(buf, offsets[:good], lengths[:good], self.records)
                self.records += good
            if good < len(offsets):
                pos = offsets[good]
            need = 0
            rest = len(buf) - pos
            if rest >= HEADER_BYTES:
                length = self._header(buf, pos, base)
                if length is None:
                    zeros = rest
                else:
                    need = HEADER_BYTES + length + FOOTER_BYTES - rest
            buf, base = (b"" if zeros else buf[pos:]), base + pos
        if zeros:
            self.truncated = f"ends in {zeros} zero bytes after record {self.records} (lost writes)"
        elif buf:
            self.truncated = self._tail(buf)

    def _corrupt(self, what: str, at: int, index: int = 0) -> IngestError:
        return IngestError(
            f"record {self.records + index + 1} (byte {at}): {what} checksum mismatch;"
            " the file is corrupt",
            file=self.name,
        )

    def _header(self, buf: bytes, pos: int, base: int) -> int | None:
        """The length of the incomplete record at ``pos``; None when all that is left is zeros."""
        (length,) = _U64.unpack_from(buf, pos)
        (stored,) = struct.unpack_from("<I", buf, pos + 8)
        if masked_crc32c(buf[pos : pos + 8]) == stored:
            return int(length)
        if not any(buf[pos:]):
            return None
        raise self._corrupt("length", base + pos)

    def _tail(self, rest: bytes) -> str:
        record = self.records + 1
        if len(rest) < HEADER_BYTES:
            return f"record {record} is cut off inside its header ({len(rest)} bytes)"
        (length,) = _U64.unpack_from(rest, 0)
        total = HEADER_BYTES + length + FOOTER_BYTES
        return f"record {record} is cut off: {len(rest)} of its {total} bytes"

    def _check(self, buf: bytes, offsets: list[int], lengths: list[int], base: int) -> int:
        """How many records pass their checksums: all, or those before an all-zero tail."""
        if not offsets:
            return 0
        arr = np.frombuffer(buf, dtype=np.uint8)
        starts = np.asarray(offsets, dtype=np.int64)
        sizes = np.asarray(lengths, dtype=np.int64)
        head = _masked(crc32c_spans(arr, starts, np.full(starts.size, 8, dtype=np.int64)))
        bad = head != _stored(arr, starts + 8)
        what = "length"
        if not bad.any() and self.verify_data:
            body = _masked(crc32c_spans(arr, starts + HEADER_BYTES, sizes))
            bad = body != _stored(arr, starts + HEADER_BYTES + sizes)
            what = "data"
        if not bad.any():
            return len(offsets)
        i = int(np.argmax(bad))
        if what == "length" and not any(buf[offsets[i] :]):
            return i
        raise self._corrupt(what, base + offsets[i], i)


def _scan(buf: bytes) -> tuple[list[int], list[int], int]:
    """Offsets and lengths of the complete records at the start of ``buf``, and where they end."""
    offsets: list[int] = []
    lengths: list[int] = []
    unpack = _U64.unpack_from
    add_offset, add_length = offsets.append, lengths.append
    n = len(buf)
    pos = 0
    while n - pos >= HEADER_BYTES:
        (length,) = unpack(buf, pos)
        end = pos + HEADER_BYTES + length + FOOTER_BYTES
        if end > n:
            break
        add_offset(pos)
        add_length(length)
        pos = end
    return offsets, lengths, pos


# --- protobuf wire format ----------------------------------------------------------------------


class Malformed(ValueError):
    """Bytes that are not a valid message of the expected kind."""


def varint(data: bytes, p: int) -> tuple[int, int]:
    """The unsigned varint at ``p`` and the offset after it."""
    result = 0
    shift = 0
    while True:
        b = data[p]
        p += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, p
        shift += 7
        if shift >= 70:
            raise Malformed("varint longer than 10 bytes")


def _signed64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def fields(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """``(field number, wire type, value or payload start, payload end)`` of a message.

    Varints give their value (end -1), fixed32/64 and length-delimited fields their byte span."""
    p = start
    while p < end:
        key, p = varint(data, p)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, p = varint(data, p)
            yield number, wire, value, -1
            continue
        if wire == 1:
            q = p + 8
        elif wire == 5:
            q = p + 4
        elif wire == 2:
            size, p = varint(data, p)
            q = p + size
        else:
            raise Malformed(f"unsupported wire type {wire} (field {number})")
        if q > end:
            raise Malformed(f"field {number} runs past the end of its message")
        yield number, wire, p, q
        p = q
    if p != end:
        raise Malformed("a field runs past the end of its message")


def _skip(data: bytes, p: int, end: int) -> int:
    """The offset after the field at ``p``."""
    key, p = varint(data, p)
    wire = key & 7
    if wire == 0:
        _value, p = varint(data, p)
    elif wire == 1:
        p += 8
    elif wire == 5:
        p += 4
    elif wire == 2:
        size, p = varint(data, p)
        p += size
    else:
        raise Malformed(f"unsupported wire type {wire} (field {key >> 3})")
    if p > end:
        raise Malformed(f"field {key >> 3} runs past the end of its message")
    return p


# TensorProto dtype -> (struct format of one element in tensor_content, repeated field number)
_DTYPES: dict[int, tuple[str, int]] = {
    1: ("<f", 5),  # DT_FLOAT
    2: ("<d", 6),  # DT_DOUBLE
    3: ("<i", 7),  # DT_INT32
    4: ("<B", 7),  # DT_UINT8
    5: ("<h", 7),  # DT_INT16
    6: ("<b", 7),  # DT_INT8
    9: ("<q", 10),  # DT_INT64
    10: ("<?", 11),  # DT_BOOL
    14: ("bf16", 13),  # DT_BFLOAT16
    17: ("<H", 7),  # DT_UINT16
    19: ("<e", 13),  # DT_HALF
    22: ("<I", 16),  # DT_UINT32
    23: ("<Q", 17),  # DT_UINT64
}
_FIXED = {5: ("<f", 4), 6: ("<d", 8)}  # float_val / double_val elements


def _half(bits: int, dtype: int) -> float:
    if dtype == 14:
        return float(_F32.unpack(struct.pack("<I", (bits & 0xFFFF) << 16))[0])
    return float(struct.unpack("<e", struct.pack("<H", bits & 0xFFFF))[0])


@dataclass
class Payload:
    """A decoded number and, when it is a fixed-width value at a fixed place, where it was."""

    value: float
    offset: int = -1
    fmt: str = ""


def tensor_scalar(data: bytes, start: int, end: int) -> Payload | None:
    """The value of a one-element numeric ``TensorProto``, or None for any other tensor."""
    dtype = 0
    elements: int | None = 1
    content: tuple[int, int] | None = None
    lists: dict[int, list[Payload]] = {}
    for number, wire, a, b in fields(data, start, end):
        if number == 1 and wire == 0:
            dtype = a
        elif number == 2 and wire == 2:
            elements = _elements(data, a, b)
        elif number == 4 and wire == 2:
            content = (a, b)
        elif number in _FIXED:
            fmt, width = _FIXED[number]
            unpack = struct.Struct(fmt).unpack_from
            if wire == 2 and (b - a) % width == 0:
                at = range(a, b, width)
            elif wire == (1 if width == 8 else 5):
                at = range(a, a + 1)
            else:
                raise Malformed(f"tensor field {number} has the wrong size")
            found = lists.setdefault(number, [])
            found.extend(Payload(float(unpack(data, p)[0]), p, fmt) for p in at)
        elif number in (7, 10, 11, 13, 16, 17):
            found = lists.setdefault(number, [])
            for value in _varints(data, wire, a, b):
                if number == 13:
                    found.append(Payload(_half(value, dtype)))
                else:
                    found.append(Payload(float(_signed64(value) if number in (7, 10) else value)))
    if elements != 1 or dtype not in _DTYPES:
        return None
    fmt, number = _DTYPES[dtype]
    if content is not None and content[1] > content[0]:
        a, b = content
        if fmt == "bf16":
            if b - a != 2:
                return None
            return Payload(_half(int.from_bytes(data[a:b], "little"), dtype))
        if b - a != struct.calcsize(fmt):
            return None
        return Payload(float(struct.unpack_from(fmt, data, a)[0]), a, fmt)
    values = lists.get(number) or next((v for v in lists.values() if v), None)
    if not values:
        return Payload(0.0)  # a tensor's missing values are zeros
    return values[0]


def _varints(data: bytes, wire: int, a: int, b: int) -> Iterator[int]:
    if wire == 0:
        yield a
        return
    if wire != 2:
        raise Malformed("a repeated integer tensor field has the wrong wire type")
    p = a
    while p < b:
        value, p = varint(data, p)
        yield value
    if p != b:
        raise Malformed("a packed tensor field runs past its end")


def _elements(data: bytes, start: int, end: int) -> int | None:
    count = 1
    for number, wire, a, b in fields(data, start, end):
        if number == 3 and wire == 0 and a:
            return None  # unknown rank
        if number == 2 and wire == 2:
            size = 1
            for n2, w2, v2, _ in fields(data, a, b):
                if n2 == 1 and w2 == 0:
                    size = _signed64(v2)
            if size < 0:
                return None
            count *= size
    return count


def plugin_name(data: bytes, start: int, end: int) -> str | None:
    for number, wire, a, b in fields(data, start, end):
        if number == 1 and wire == 2:
            for n2, w2, a2, b2 in fields(data, a, b):
                if n2 == 1 and w2 == 2:
                    return data[a2:b2].decode("utf-8", "replace")
    return None


# --- events to scalar points -------------------------------------------------------------------


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
                        step = _signed64(step)
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
                    p = _skip(data, p, end)
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
                    q = _skip(data, q, s1)
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
            simple = float(_F32.unpack_from(data, span[0])[0])
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

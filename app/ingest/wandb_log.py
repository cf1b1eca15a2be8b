"""The W&B transaction log (``run-<id>.wandb``): framing, the protobuf wire format of its
records, and :func:`decode_log`, which turns one log into history rows, the last summary, config
changes, system samples and the run's start and exit.

The file is a 7-byte header (``:W&B``, u16 0xBEE1, version 0) followed by LevelDB-log framing in
32 KiB blocks (counted from the start of the file): each chunk is ``crc32 u32 | length u16 |
type u8 | payload``, all little-endian, where type is 1 full, 2 first, 3 middle or 4 last and the
checksum is zlib's crc32 of the payload seeded with the crc32 of the type byte. A block tail
shorter than a chunk header is padding. A record is one serialized ``Record`` message.

Pure Python and numpy (plus orjson and pandas' hash table), no protobuf or wandb at run time.
Logs hold millions of small messages: chunks are checked in one tight loop, then the fields of
all messages of a batch are found at once (numpy "pointer jumping": each step moves every
message to its next field), keys are grouped by their bytes and values parsed as one JSON array.
Only the fields the reader needs are named here; everything else is skipped by wire type:

    Record:          history 2, summary 3, config 5, stats 7, run 17, exit 18
    HistoryRecord:   item 1 (HistoryItem), step 2 (num 1)
    HistoryItem, SummaryItem, ConfigItem, StatsItem:  key 1, nested_key 2 (repeated), value_json 16
    SummaryRecord, ConfigRecord:  update 1, remove 2
    StatsRecord:     timestamp 2, item 3
    RunRecord:       run_id 1, config 4, starting_step 14, start_time 17, resumed 18, resume 24
    RunExitRecord:   exit_code 1
    Timestamp:       seconds 1, nanos 2
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO

import numpy as np
import orjson

from app.ingest.errors import IngestError, Warnings

MAGIC = b":W&B"
HEADER = MAGIC + bytes([0xE1, 0xBE, 0])
BLOCK = 32 * 1024
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
WINDOW_BLOCKS = 512  # 16 MiB read and framed at a time
PAD = 32  # zero bytes after a batch's payload: reads past a message stay in the array

HISTORY, SUMMARY, CONFIG, STATS, RUN, EXIT = 2, 3, 5, 7, 17, 18
VALUE_JSON = 16

_SEEDS = [zlib.crc32(bytes([t])) for t in range(256)]
_CHUNK = struct.Struct("<IHB")


class WireError(ValueError):
    """A message that does not follow the protobuf wire format."""


@dataclass
class RecordBatch:
    """Whole records, their payloads back to back in ``data`` (then ``PAD`` zero bytes)."""

    data: bytes
    starts: np.ndarray  # int64 offset of each record in data
    ends: np.ndarray
    first_number: int  # 1-based number of the batch's first record in the file

    @property
    def array(self) -> np.ndarray:
        return np.frombuffer(self.data, dtype=np.uint8)


def iter_batches(
    stream: IO[bytes],
    path: str,
    warnings: Warnings,
    *,
    on_bytes: Callable[[int], None] | None = None,
) -> Iterator[RecordBatch]:
    """The records of a log, a window of blocks at a time. A log cut off mid-record (what a
    killed writer leaves) ends with a warning; damage anywhere else is an :class:`IngestError`
    naming the file, the record number and its byte offset."""
    head = _read_full(stream, CHUNK_HEADER)
    if len(head) < CHUNK_HEADER and HEADER.startswith(head):
        warnings.add(
            f"{path}: empty log ({len(head)} bytes): the writer stopped before writing anything",
            kind=f"wandb-tail:{path}",
        )
        return
    if head[:6] != HEADER[:6]:
        raise IngestError(
            f"not a W&B run log: it starts with {head[:7]!r}, expected {HEADER!r}", file=path
        )
    if head[6] != 0:
        raise IngestError(f"unsupported W&B log version {head[6]} (expected 0)", file=path)
    window = head + _read_full(stream, WINDOW_BLOCKS * BLOCK - CHUNK_HEADER)
    framer = _Framer(path, warnings)
    base = 0
    while window:
        nxt = _read_full(stream, WINDOW_BLOCKS * BLOCK)
        if on_bytes is not None:
            on_bytes(len(window))
        batch = framer.frame(window, base, last=not nxt)
        if batch is not None:
            yield batch
        if framer.stopped:
            return
        base += len(window)
        window = nxt


def _read_full(stream: IO[bytes], size: int) -> bytes:
    parts = []
    while size > 0:
        part = stream.read(size)
        if not part:
            break
        parts.append(part)
        size -= len(part)
    return b"".join(parts)


class _Framer:
    """Turns windows of whole blocks into record batches, carrying a record that spans windows."""

    def __init__(self, path: str, warnings: Warnings) -> None:
        self.path = path
        self.warnings = warnings
        self.carry = b""  # payload of a record whose last chunk is in a later window
        self.records = 0  # records completed so far
        self.stopped = False

    def frame(self, window: bytes, base: int, *, last: bool) -> RecordBatch | None:
        size = len(window)
        pos, kinds, pieces, stop = _scan(window, CHUNK_HEADER if base == 0 else 0)
        kind = np.asarray(kinds, dtype=np.int64)
        finishes = (kind == FULL) | (kind == LAST)
        starts = (kind == FULL) | (kind == FIRST)
        follows = np.concatenate(([not self.carry], finishes[:-1]))
        disorder = np.flatnonzero(starts != follows)
        if disorder.size:
            i = int(disorder[0])
            what = "a record starts before the previous one ended"
            if not starts[i]:
                what = "a continuation chunk with no first chunk before it"
            raise self._error(int(np.count_nonzero(finishes[:i])), base + pos[i], what)
        tail = None
        if stop is not None:
            tail = self._problem(window, stop, int(np.count_nonzero(finishes)), base, last)
        lengths = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
        record_ends = (len(self.carry) + np.cumsum(lengths))[finishes]
        whole = int(np.flatnonzero(finishes)[-1]) + 1 if record_ends.size else 0
        data = b"".join([self.carry, *pieces[:whole], bytes(PAD)]) if whole else b""
        self.carry = b"".join([self.carry if not whole else b"", *pieces[whole:]])
        self.records += int(record_ends.size)
        if tail is None and last and self.carry:
            tail = f"the last record is cut off at byte {base + size} ({len(self.carry)} bytes)"
        if tail is not None:
            self.stopped = True
            self.warnings.add(
                f"{self.path}: {tail}; the writer stopped mid-write (crashed or killed); the"
                f" {self.records} complete records before it are kept",
                kind=f"wandb-tail:{self.path}",
            )
        if not whole:
            return None
        first = np.concatenate(([0], record_ends[:-1])).astype(np.int64)
        number = self.records - int(record_ends.size) + 1
        return RecordBatch(data, first, record_ends, number)

    def _problem(self, window: bytes, at: int, finished: int, base: int, last: bool) -> str:
        """What is wrong with the chunk at ``at``: a tolerated tail (returned) or an error."""
        size = len(window)
        offset = base + at
        if at + CHUNK_HEADER > size:
            return f"the file ends inside a chunk header at byte {offset}"
        crc, length, kind = _CHUNK.unpack_from(window, at)
        end = at + CHUNK_HEADER + length
        if crc == length == kind == 0:
            if last and not any(window[at:]):
                return f"the file ends in zero bytes from byte {offset}"
            raise self._error(finished, offset, "a zero chunk header inside the log")
        if not FULL <= kind <= LAST:
            raise self._error(finished, offset, f"unknown chunk type {kind}")
        if length > BLOCK - at % BLOCK - CHUNK_HEADER:
            raise self._error(
                finished, offset, f"chunk length {length} runs past the end of its 32 KiB block"
            )
        if end > size:
            return f"the last chunk is cut off at byte {base + size} (it starts at byte {offset})"
        if last and not any(window[end:]):
            return f"the last chunk (byte {offset}) fails its checksum (a torn write)"
        raise self._error(finished, offset, "checksum mismatch; the log is corrupt here")

    def _error(self, finished: int, offset: int, message: str) -> IngestError:
        """An error at the record after ``finished`` complete records of this window."""
        record = self.records + finished + 1
        return IngestError(f"record {record} (byte {offset}): {message}", file=self.path)


def _scan(window: bytes, p: int) -> tuple[list[int], list[int], list[bytes], int | None]:
    """Chunk offsets, types and payloads of a window, up to the first chunk that is damaged or
    cut off (its offset is returned last, None when there is none). The hot loop of the reader:
    locals only."""
    unpack = _CHUNK.unpack_from
    crc32 = zlib.crc32
    seeds = _SEEDS
    size = len(window)
    offsets: list[int] = []
    kinds: list[int] = []
    pieces: list[bytes] = []
    add_offset, add_kind, add_piece = offsets.append, kinds.append, pieces.append
    while p < size:
        room = 32768 - (p & 32767)  # BLOCK
        if room < 7:  # CHUNK_HEADER: block padding
            p += room
            continue
        if p + 7 > size:
            return offsets, kinds, pieces, p
        crc, length, kind = unpack(window, p)
        start = p + 7
        end = start + length
        if kind > 4 or not kind or length > room - 7 or end > size:
            return offsets, kinds, pieces, p
        piece = window[start:end]
        if crc32(piece, seeds[kind]) != crc:
            return offsets, kinds, pieces, p
        add_offset(p)
        add_kind(kind)
        add_piece(piece)
        p = end
    return offsets, kinds, pieces, None


@dataclass
class Fields:
    """Fields of many messages, in no particular order; ``owner`` indexes the messages."""

    owner: np.ndarray
    number: np.ndarray  # field number
    wire: np.ndarray  # wire type
    tag: np.ndarray  # offset of the field's tag
    start: np.ndarray  # offset of the value (after the length, for length-delimited fields)
    end: np.ndarray

    def select(self, number: int, wire: int = 2) -> Fields:
        keep = (self.number == number) & (self.wire == wire)
        return Fields(*(getattr(self, name)[keep] for name in FIELD_NAMES))


FIELD_NAMES = ("owner", "number", "wire", "tag", "start", "end")


def walk(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, keep: tuple[int, ...] = ()
) -> Fields:
    """The fields of the messages ``buf[starts[i]:ends[i]]`` (only those numbered in ``keep``,
    when given). Raises :class:`WireError` with the index of the first broken message
    (``args[1]``)."""
    parts: list[tuple[np.ndarray, ...]] = []
    owner = np.flatnonzero(ends > starts)
    pos = starts[owner].astype(np.int64)
    limit = ends[owner].astype(np.int64)
    while owner.size:
        tag, at = varints(buf, pos)
        wire = tag & 7
        if (wire == 2).all():  # the usual case: only length-delimited fields
            length, start = varints(buf, at)
            end = start + length
            broken = (length < 0) | (end > limit) | (tag < 8)
        else:
            value, after = varints(buf, at)
            start = np.where(wire == 2, after, at)
            kinds = [wire == 0, wire == 2, wire == 1, wire == 5]
            end = np.select(kinds, [after, after + value, at + 8, at + 4], -1)
            broken = (end < start) | (end > limit) | (tag < 8) | ((wire == 2) & (value < 0))
        if broken.any():
            raise WireError("malformed message", int(owner[int(np.argmax(broken))]))
        number = tag >> 3
        if keep:
            kept = number == keep[0]
            for other in keep[1:]:
                kept |= number == other
            parts.append(tuple(c[kept] for c in (owner, number, wire, pos, start, end)))
        else:
            parts.append((owner, number, wire, pos, start, end))
        more = end < limit
        owner, pos, limit = owner[more], end[more], limit[more]
    if not parts:
        return Fields(*(np.zeros(0, dtype=np.int64) for _ in FIELD_NAMES))
    return Fields(*(np.concatenate(column) for column in zip(*parts, strict=True)))


def varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varints at ``pos`` (up to 5 bytes; longer ones read as -1) and the offsets after.
    ``buf`` must extend 10 bytes past any varint (``PAD``)."""
    byte = buf[pos]
    value = (byte & 0x7F).astype(np.int64)
    more = byte >= 0x80
    if not more.any():
        return value, pos + 1
    size = more.astype(np.int64) + 1
    byte = buf[pos + 1]
    value |= np.where(more, (byte & 0x7F).astype(np.int64) << 7, 0)
    deeper = np.flatnonzero(more & (byte >= 0x80))
    shift = 14
    while deeper.size:
        if shift > 28:
            value[deeper] = -1
            # skip the rest of a long varint (an int64 field), up to its 10 bytes
            for _ in range(5):
                byte = buf[pos[deeper] + size[deeper]]
                size[deeper] += 1
                deeper = deeper[byte >= 0x80]
            break
        byte = buf[pos[deeper] + size[deeper]]
        value[deeper] |= (byte & 0x7F).astype(np.int64) << shift
        size[deeper] += 1
        deeper = deeper[byte >= 0x80]
        shift += 7
    return value, pos + size


KEY_WIDTH = 32  # keys up to this many bytes are grouped with numpy, longer ones one by one
_MIX = [
    np.uint64(m)
    for m in (
        0x9E3779B97F4A7C15,
        0xC2B2AE3D27D4EB4F,
        0x165667B19E3779F9,
        0xD6E8FEB86659FD93,
        0xFF51AFD7ED558CCD,
    )
]

_LOW_BYTES = np.array([(1 << (8 * n)) - 1 for n in range(9)], dtype=np.uint64)


def item_spans(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(key_end, value_start, value_end)`` of items (``key 1, nested_key 2, value_json 16``):
    the key is ``[start, key_end)``, the value JSON ``[value_start, value_end)``, (-1, -1) when
    the item has none. Raises :class:`WireError` (``args[1]``: the item) for a broken item."""
    # fast path: key fields, then the value last, all with one-byte lengths (W&B's layout)
    at = starts.copy()
    odd = np.zeros(starts.size, dtype=bool)
    for _ in range(8):
        tag = buf[at]
        key = ((tag == 0x0A) | (tag == 0x12)) & (at < ends)
        if not key.any():
            break
        size = buf[at + 1].astype(np.int64)
        odd |= key & (size >= 0x80)
        at = np.minimum(np.where(key, at + 2 + size, at), ends)
    size = buf[at + 2].astype(np.int64)
    valued = (buf[at] == 0x82) & (buf[at + 1] == 0x01) & (size < 0x80) & (at + 3 + size == ends)
    odd |= ~valued & (at != ends)
    value_start = np.where(valued, at + 3, -1)
    value_end = np.where(valued, ends, -1)
    key_end = at
    slow = np.flatnonzero(odd)
    if slow.size:
        try:
            fields = walk(buf, starts[slow], ends[slow])
        except WireError as exc:
            raise WireError("malformed item", int(slow[int(exc.args[1])])) from None
        key_end[slow] = ends[slow]
        value_start[slow] = value_end[slow] = -1
        values = fields.select(VALUE_JSON)
        rows = slow[values.owner]
        key_end[rows], value_start[rows], value_end[rows] = values.tag, values.start, values.end
    return key_end, value_start, value_end


def group_spans(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, ...]:
    """Equal byte spans grouped: ``(group, first)`` where ``group[i]`` numbers the distinct
    contents (-1 for spans longer than ``KEY_WIDTH``) and ``first[g]`` is a span of group g.
    Exact: spans are compared whole, the hash only proposes the groups."""
    import pandas as pd  # a hash table in C; imported here, when a log is read

    length = ends - starts
    group = np.full(starts.size, -1, dtype=np.int64)
    short = np.flatnonzero(length <= KEY_WIDTH)
    if not short.size:
        return group, np.zeros(0, dtype=np.int64)
    size = length[short]
    width = max(8, -(-int(size.max()) // 8) * 8)
    words = np.lib.stride_tricks.sliding_window_view(buf, width)[starts[short]].view("<u8")
    mixed = size.astype(np.uint64) * _MIX[4]
    for k in range(width // 8):
        words[:, k] &= _LOW_BYTES[np.clip(size - 8 * k, 0, 8)]
        mixed = (mixed ^ words[:, k]) * _MIX[k]
        mixed ^= mixed >> np.uint64(29)
    codes, uniques = pd.factorize(mixed)
    first = np.empty(len(uniques), dtype=np.int64)
    first[codes[::-1]] = np.arange(codes.size - 1, -1, -1)
    rep = first[codes]
    same = (size == size[rep]) & (words == words[rep]).all(axis=1)
    if not same.all():  # pragma: no cover - a 64-bit hash collision
        return group, np.zeros(0, dtype=np.int64)
    group[short] = codes
    return group, short[first]


def parse_numbers(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The JSON numbers (or ``NaN``, ``Infinity``, ``-Infinity``) in the spans, parsed as one
    JSON array. Raises ValueError when one is not a number."""
    out = np.full(starts.size, np.nan)
    length = ends - starts
    head = buf[starts]
    nan = (head == ord("N")) & (length == 3)
    inf = (head == ord("I")) & (length == 8)
    neg = (head == ord("-")) & (buf[starts + 1] == ord("I")) & (length == 9)
    out[inf] = np.inf
    out[neg] = -np.inf
    plain = np.flatnonzero(~(nan | inf | neg))
    if not plain.size:
        return out
    size = length[plain] + 1  # each value and the comma after it
    before = np.cumsum(size) - size
    text = buf[np.repeat(starts[plain] - before, size) + np.arange(int(size.sum()))]
    text[before + size - 1] = ord(",")
    text[-1] = ord("]")
    try:
        parsed = orjson.loads(b"[" + text.tobytes())
    except orjson.JSONDecodeError:
        raise ValueError("not a list of numbers") from None
    if len(parsed) != plain.size:
        raise ValueError("not a list of numbers")
    try:
        out[plain] = np.asarray(parsed, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise ValueError("not a list of numbers") from None
    return out


# Scalar decoding, for the few records that are not history or summary rows.


def read_varint(data: bytes, p: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if p >= len(data) or shift > 63:
            raise WireError("truncated varint")
        byte = data[p]
        p += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, p
        shift += 7


def fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """``(field number, value)`` of one message: ints for varints and fixed-size fields, bytes
    for length-delimited ones."""
    out: list[tuple[int, int | bytes]] = []
    p, n = 0, len(data)
    while p < n:
        tag, p = read_varint(data, p)
        wire = tag & 7
        value: int | bytes
        if wire == 0:
            value, p = read_varint(data, p)
        elif wire == 2:
            size, p = read_varint(data, p)
            value = data[p : p + size]
            p += size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            value = int.from_bytes(data[p : p + width], "little")
            p += width
        else:
            raise WireError(f"wire type {wire}")
        if p > n:
            raise WireError("field runs past the end of its message")
        out.append((tag >> 3, value))
    return out


def signed(value: int) -> int:
    """An int32/int64 varint as the signed number it encodes."""
    return value - (1 << 64) if value >= 1 << 63 else value


def item_parts(data: bytes) -> tuple[list[str], bytes | None]:
    """``(key path, value_json)`` of a history/summary/config/stats item: the nested keys, or
    the plain key as a path of one."""
    key = ""
    nested: list[str] = []
    value: bytes | None = None
    for number, raw in fields(data):
        if not isinstance(raw, bytes):
            continue
        if number == 1:
            key = raw.decode("utf-8", "replace")
        elif number == 2:
            nested.append(raw.decode("utf-8", "replace"))
        elif number == VALUE_JSON:
            value = raw
    return (nested or [key]), value


def timestamp(data: bytes) -> float:
    """A ``google.protobuf.Timestamp`` in unix seconds."""
    seconds = nanos = 0
    for number, raw in fields(data):
        if number == 1 and isinstance(raw, int):
            seconds = signed(raw)
        elif number == 2 and isinstance(raw, int):
            nanos = signed(raw)
    return seconds + nanos / 1e9


# One log's records: history rows, the last summary, config changes, system samples, run info.

NUMBER, MISSING, OTHER = 0, 1, 2  # what an item's value is; MISSING: none, or JSON null
_NUMERIC_START = np.zeros(256, dtype=bool)
_NUMERIC_START[list(b"-0123456789NI")] = True  # JSON numbers, NaN, Infinity, -Infinity


class KeyTable:
    """Item keys by the bytes that encode them (an item without its value), so a key is decoded
    once, not once per logged value. Codes are shared by all logs of a run."""

    def __init__(self) -> None:
        self.codes: dict[bytes, int] = {}
        self.names: list[str] = []

    def encode(self, encoded: list[bytes]) -> np.ndarray:
        codes = self.codes
        for raw in dict.fromkeys(encoded):
            if raw not in codes:
                codes[raw] = len(self.names)
                self.names.append("/".join(item_parts(raw)[0]))
        return np.fromiter(map(codes.__getitem__, encoded), dtype=np.int64, count=len(encoded))

    def find(self, name: str) -> np.ndarray:
        return np.asarray([c for c, n in enumerate(self.names) if n == name], dtype=np.int64)


@dataclass
class Items:
    """The items of history rows: row, key code, value (NaN unless a number) and value class."""

    row: np.ndarray
    code: np.ndarray
    value: np.ndarray
    kind: np.ndarray  # NUMBER, MISSING or OTHER
    first_byte: np.ndarray  # of the value's JSON text: says what a non-number is

    @staticmethod
    def concat(parts: list[Items], shifts: list[int]) -> Items:
        """The items of several logs, their rows shifted by ``shifts``."""
        if not parts:
            empty = np.zeros(0, dtype=np.int64)
            return Items(empty, empty, np.zeros(0), np.zeros(0, np.int8), np.zeros(0, np.uint8))
        return Items(
            np.concatenate([p.row + shift for p, shift in zip(parts, shifts, strict=True)]),
            np.concatenate([p.code for p in parts]),
            np.concatenate([p.value for p in parts]),
            np.concatenate([p.kind for p in parts]),
            np.concatenate([p.first_byte for p in parts]),
        )

    def take(self, mask: np.ndarray) -> Items:
        return Items(
            self.row[mask],
            self.code[mask],
            self.value[mask],
            self.kind[mask],
            self.first_byte[mask],
        )


@dataclass
class Sample:
    """A system-metrics sample and the history row logged before it (-1: none yet)."""

    row: int
    time: float | None
    values: list[tuple[str, bytes | None]]


@dataclass
class LogData:
    path: str
    run_id: str | None = None
    start_time: float | None = None
    starting_step: int = 0
    resumed: bool = False
    exit_code: int | None = None  # None: no exit record
    rows: int = 0
    steps: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    times: np.ndarray = field(default_factory=lambda: np.zeros(0))
    items: Items | None = None
    samples: list[Sample] = field(default_factory=list)
    config_ops: list[tuple[bool, list[str], bytes | None]] = field(default_factory=list)
    summary: dict[int, bytes | None] = field(default_factory=dict)  # key code -> last value


def decode_log(
    stream: IO[bytes],
    path: str,
    warnings: Warnings,
    keys: KeyTable,
    *,
    on_bytes: Callable[[int], None] | None = None,
) -> LogData:
    """Everything the reader takes from one ``run-<id>.wandb``."""
    decoder = _Decoder(path, keys)
    for batch in iter_batches(stream, path, warnings, on_bytes=on_bytes):
        decoder.batch(batch)
    return decoder.finish()


class _Decoder:
    def __init__(self, path: str, keys: KeyTable) -> None:
        self.path = path
        self.keys = keys
        self.data = LogData(path)
        self.items: list[Items] = []
        self.step_fields: list[np.ndarray] = []  # HistoryRecord.step of each row, -1 if unset
        self.row_records: list[np.ndarray] = []  # record number of each row

    def batch(self, batch: RecordBatch) -> None:
        buf = batch.array
        wanted = (HISTORY, SUMMARY, CONFIG, STATS, RUN, EXIT)
        top = self._walk(batch, batch.starts, batch.ends, None, wanted)
        kind = np.zeros(batch.starts.size, dtype=np.int64)
        body_start = np.zeros(batch.starts.size, dtype=np.int64)
        body_end = np.zeros(batch.starts.size, dtype=np.int64)
        for number in wanted:
            sel = top.select(number)
            kind[sel.owner], body_start[sel.owner], body_end[sel.owner] = number, sel.start, sel.end
        history = np.flatnonzero(kind == HISTORY)
        rows_before = self.data.rows
        if history.size:
            self._history(batch, buf, history, body_start[history], body_end[history])
        summary = np.flatnonzero(kind == SUMMARY)
        if summary.size:
            self._summary(batch, summary, body_start[summary], body_end[summary])
        for index in np.flatnonzero(np.isin(kind, (CONFIG, STATS, RUN, EXIT))).tolist():
            body = batch.data[int(body_start[index]) : int(body_end[index])]
            row = rows_before + int(np.searchsorted(history, index)) - 1
            try:
                self._rare(int(kind[index]), body, row)
            except WireError as exc:
                raise self._error(batch.first_number + index, str(exc)) from None

    def finish(self) -> LogData:
        data = self.data
        data.items = Items.concat(self.items, [0] * len(self.items))
        steps = np.concatenate(self.step_fields) if self.step_fields else data.steps
        records = np.concatenate(self.row_records) if self.row_records else data.steps
        items = data.items
        stamped = np.isin(items.code, self.keys.find("_timestamp")) & (items.kind == NUMBER)
        data.times = np.full(data.rows, np.nan)
        data.times[items.row[stamped]] = items.value[stamped]
        stepped = np.isin(items.code, self.keys.find("_step"))
        values = items.value[stepped]
        bad = (items.kind[stepped] != NUMBER) | ~np.isfinite(values)
        bad |= (values != np.floor(values)) | (values < 0) | (values >= 2.0**62)
        if bad.any():
            row = int(items.row[stepped][int(np.argmax(bad))])
            raise self._error(int(records[row]), "'_step' is not a step number")
        steps[items.row[stepped]] = values.astype(np.int64)
        if (steps < 0).any():
            raise self._error(int(records[int(np.argmax(steps < 0))]), "history row without _step")
        data.steps = steps
        return data

    def _error(self, record: int, message: str) -> IngestError:
        return IngestError(f"record {record}: {message}", file=self.path)

    def _walk(
        self,
        batch: RecordBatch,
        starts: np.ndarray,
        ends: np.ndarray,
        records: np.ndarray | None,
        keep: tuple[int, ...],
    ) -> Fields:
        """Fields of the messages; ``records`` maps a message to its record in the batch."""
        try:
            return walk(batch.array, starts, ends, keep)
        except WireError as exc:
            at = int(exc.args[1])
            record = at if records is None else int(records[at])
            raise self._error(batch.first_number + record, "not a valid W&B record") from None

    def _keyed(
        self, batch: RecordBatch, items: Fields, records: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Key code and value span of each item (``items.owner`` indexes ``records``); the
        span is (-1, -1) for an item without a value."""
        buf, data = batch.array, batch.data
        try:
            key_end, value_start, value_end = item_spans(buf, items.start, items.end)
        except WireError as exc:
            record = batch.first_number + int(records[items.owner[int(exc.args[1])]])
            raise self._error(record, "not a valid W&B record") from None
        group, first = group_spans(buf, items.start, key_end)
        spans = zip(items.start[first].tolist(), key_end[first].tolist(), strict=True)
        code = np.empty(items.owner.size, dtype=np.int64)
        grouped = group >= 0
        after = (value_start >= 0) & (value_end != items.end)  # fields after the value: rare
        alone = np.flatnonzero(~grouped | after)
        try:
            code[grouped] = self.keys.encode([data[a:b] for a, b in spans])[group[grouped]]
            if alone.size:
                start, end = items.start[alone].tolist(), items.end[alone].tolist()
                cut = key_end[alone].tolist()
                resume = np.maximum(value_end, key_end)[alone].tolist()
                spans4 = zip(start, cut, resume, end, strict=True)
                code[alone] = self.keys.encode([data[a:b] + data[c:d] for a, b, c, d in spans4])
        except WireError:  # pragma: no cover - item_spans has checked the key fields
            raise self._error(batch.first_number + int(records[0]), "bad item key") from None
        return code, value_start, value_end

    def _history(
        self,
        batch: RecordBatch,
        buf: np.ndarray,
        records: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
    ) -> None:
        fields = self._walk(batch, starts, ends, records, (1, 2))
        items = _in_file_order(fields.select(1))  # memory is read in sequence: faster
        code, value_start, value_end = self._keyed(batch, items, records)
        has_value = value_start >= 0
        first = np.zeros(code.size, dtype=np.uint8)
        first[has_value] = buf[value_start[has_value]]
        kind = np.where(has_value & (first != ord("n")), OTHER, MISSING).astype(np.int8)
        numeric = np.flatnonzero(_NUMERIC_START[first] & has_value)
        value = np.full(code.size, np.nan)
        try:
            value[numeric] = parse_numbers(buf, value_start[numeric], value_end[numeric])
            kind[numeric] = NUMBER
        except ValueError:
            for i in numeric.tolist():  # one by one, to find those that are not numbers
                try:
                    value[i] = float(batch.data[int(value_start[i]) : int(value_end[i])])
                    kind[i] = NUMBER
                except ValueError:
                    first[i] = 0  # reported as malformed
        self.items.append(Items(items.owner + self.data.rows, code, value, kind, first))
        step = np.full(records.size, -1, dtype=np.int64)
        marks = fields.select(2)  # HistoryStep {num 1}
        if marks.owner.size:
            nums = self._walk(batch, marks.start, marks.end, records[marks.owner], (1,))
            nums = nums.select(1, wire=0)
            step[marks.owner[nums.owner]] = varints(buf, nums.start)[0]
        self.step_fields.append(step)
        self.row_records.append(batch.first_number + records)
        self.data.rows += int(records.size)

    def _summary(
        self, batch: RecordBatch, records: np.ndarray, starts: np.ndarray, ends: np.ndarray
    ) -> None:
        """Only the last value of each key is kept (None for a removed key)."""
        fields = self._walk(batch, starts, ends, records, (1, 2))
        ops = _in_file_order(fields.select(1), fields.select(2))
        code, value_start, value_end = self._keyed(batch, ops, records)
        removed = np.isin(ops.tag, fields.select(2).tag)
        last = np.full(int(code.max()) + 1, -1, dtype=np.int64)
        last[code] = np.arange(code.size)  # the last assignment wins
        for i in last[last >= 0].tolist():
            a, b = int(value_start[i]), int(value_end[i])
            self.data.summary[int(code[i])] = None if removed[i] or a < 0 else batch.data[a:b]

    def _rare(self, kind: int, body: bytes, row: int) -> None:
        """A config, stats, run or exit record; ``row`` is the history row logged before it."""
        data = self.data
        if kind == STATS:
            when: float | None = None
            values: list[tuple[str, bytes | None]] = []
            for number, raw in fields(body):
                if number == 2 and isinstance(raw, bytes):
                    when = timestamp(raw)
                elif number == 3 and isinstance(raw, bytes):
                    key, value = item_parts(raw)
                    values.append(("/".join(key), value))
            data.samples.append(Sample(row, when, values))
        elif kind == CONFIG:
            self._config(body)
        elif kind == EXIT:
            data.exit_code = 0
            for number, raw in fields(body):
                if number == 1 and isinstance(raw, int):
                    data.exit_code = signed(raw)
        elif kind == RUN:
            first = data.run_id is None
            for number, raw in fields(body):
                if number == 4 and isinstance(raw, bytes):
                    self._config(raw)
                elif not first:
                    continue
                elif number == 1 and isinstance(raw, bytes):
                    data.run_id = raw.decode("utf-8", "replace")
                elif number == 17 and isinstance(raw, bytes):
                    data.start_time = timestamp(raw)
                elif number == 14 and isinstance(raw, int):
                    data.starting_step = signed(raw)
                elif number in (18, 24) and raw:
                    data.resumed = True

    def _config(self, body: bytes) -> None:
        for number, raw in fields(body):
            if number in (1, 2) and isinstance(raw, bytes):
                path, value = item_parts(raw)
                self.data.config_ops.append((number == 2, path, value))


def _in_file_order(*parts: Fields) -> Fields:
    """Fields of several selections together, in file order."""
    joined = [np.concatenate([getattr(p, name) for p in parts]) for name in FIELD_NAMES]
    order = np.argsort(joined[FIELD_NAMES.index("tag")], kind="stable")
    return Fields(*(column[order] for column in joined))

"""The protobuf wire format of W&B log records, decoded with numpy, no protobuf at run time.

The fields of all messages of a batch are found at once (numpy "pointer jumping": each step moves
every message to its next field), item keys are grouped by their bytes and number values parsed
as one JSON array; the few other records are decoded one by one in plain Python. Fields are
skipped by wire type; the layouts decoded here are

    HistoryItem, SummaryItem, ConfigItem, StatsItem:  key 1, nested_key 2 (repeated), value_json 16
    Timestamp:       seconds 1, nanos 2
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import orjson

VALUE_JSON = 16


class WireError(ValueError):
    """A message that does not follow the protobuf wire format."""


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


def in_file_order(*parts: Fields) -> Fields:
    """Fields of several selections together, in file order."""
    joined = [np.concatenate([getattr(p, name) for p in parts]) for name in FIELD_NAMES]
    order = np.argsort(joined[FIELD_NAMES.index("tag")], kind="stable")
    return Fields(*(column[order] for column in joined))


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
    ``buf`` must extend 10 bytes past any varint (``wandb_framing.PAD``)."""
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

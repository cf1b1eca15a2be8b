"""The protobuf wire format, enough of it for TensorBoard's scalars: fields of a message, and the
value of a one-element ``TensorProto``. Pure Python, no protobuf at run time. The messages read
here (:mod:`app.ingest.tf_events` reads the ``Event`` around them); other fields are skipped by
wire type:

    SummaryMetadata:  plugin_data 1 (plugin_name 1)
    TensorProto:      dtype 1, tensor_shape 2 (dim 2: size 1), tensor_content 4, half_val 13,
                      float_val 5, double_val 6, int_val 7, int64_val 10, bool_val 11,
                      uint32_val 16, uint64_val 17 (repeated numbers packed or not)
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

F32 = struct.Struct("<f")


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


def signed64(value: int) -> int:
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


def skip_field(data: bytes, p: int, end: int) -> int:
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
        return float(F32.unpack(struct.pack("<I", (bits & 0xFFFF) << 16))[0])
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
                    found.append(Payload(float(signed64(value) if number in (7, 10) else value)))
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
                    size = signed64(v2)
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

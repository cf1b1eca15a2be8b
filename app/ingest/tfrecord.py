"""TFRecord framing of TensorBoard event files, with its CRC-32C checksums.

A record is ``u64 length | u32 masked crc32c(length) | data | u32 masked crc32c(data)``, all
little-endian; ``data`` is one serialized ``Event`` (decoded by :mod:`app.ingest.tf_events`).
Pure Python and numpy: no tensorflow, tensorboard or protobuf at run time. Checksums are computed
for a whole block of records at once (numpy, one byte position of every record per step), so
checking them stays cheap.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO

import numpy as np

from app.ingest.errors import IngestError

HEADER_BYTES = 12  # u64 length + u32 crc of the length
FOOTER_BYTES = 4
BLOCK_BYTES = 8 << 20

_MASK_DELTA = 0xA282EAD8
_U64 = struct.Struct("<Q")


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

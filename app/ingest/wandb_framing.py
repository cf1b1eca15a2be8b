"""Framing of the W&B transaction log (``run-<id>.wandb``): the file header, LevelDB-log chunks
and their checksums, turned into batches of whole records.

The file is a 7-byte header (``:W&B``, u16 0xBEE1, version 0) followed by LevelDB-log framing in
32 KiB blocks (counted from the start of the file): each chunk is ``crc32 u32 | length u16 |
type u8 | payload``, all little-endian, where type is 1 full, 2 first, 3 middle or 4 last and the
checksum is zlib's crc32 of the payload seeded with the crc32 of the type byte. A block tail
shorter than a chunk header is padding. A record is one serialized ``Record`` message (decoded by
:mod:`app.ingest.wandb_proto` and :mod:`app.ingest.wandb_log`).

Logs hold millions of small messages: the chunks of a window of blocks are checked in one tight
loop, and a batch's payloads are joined back to back for the vectorised decoding that follows.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO

import numpy as np

from app.ingest.errors import IngestError, Warnings

MAGIC = b":W&B"
HEADER = MAGIC + bytes([0xE1, 0xBE, 0])
BLOCK = 32 * 1024
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
PAD = 32  # zero bytes after a batch's payload: reads past a message stay in the array

_SEEDS = [zlib.crc32(bytes([t])) for t in range(256)]
_CHUNK = struct.Struct("<IHB")


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
    window_blocks: int,
    on_bytes: Callable[[int], None] | None = None,
) -> Iterator[RecordBatch]:
    """The records of a log, ``window_blocks`` blocks at a time. A log cut off mid-record (what
    a killed writer leaves) ends with a warning; damage anywhere else is an :class:`IngestError`
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
    window = head + _read_full(stream, window_blocks * BLOCK - CHUNK_HEADER)
    framer = _Framer(path, warnings)
    base = 0
    while window:
        nxt = _read_full(stream, window_blocks * BLOCK)
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

"""A JSON Lines file cut into byte ranges of whole lines, for parsing by several workers.

Each range starts at the beginning of a line and ends just after a newline (the last one at the
end of the file), so the ranges parsed one after another read exactly the file's lines. Each
knows the number of its first line, so an error in any part names the line as in the file.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import IO, Any

BLOCK = 16 << 20
BLOCK_READ = 1 << 20


@dataclass(frozen=True)
class LineRange:
    start: int  # byte offset of the range's first line
    end: int  # byte offset just past its last line
    first_line: int  # 1-based number of its first line


def split_lines(stream: IO[bytes], size: int, part_bytes: int) -> list[LineRange]:
    """Cut a seekable ``stream`` of ``size`` bytes into ranges of about ``part_bytes``. A line
    longer than a part makes its range longer; no range is empty."""
    if part_bytes <= 0:
        raise ValueError("part_bytes must be positive")
    starts = [0]
    while starts[-1] + part_bytes < size:
        cut = _next_line_start(stream, starts[-1] + part_bytes, size)
        if cut >= size:
            break
        starts.append(cut)
    ends = [*starts[1:], size]
    lines = _count_newlines(stream, starts)
    return [
        LineRange(start, end, first_line)
        for start, end, first_line in zip(starts, ends, lines, strict=True)
    ]


def read_range(stream: IO[bytes], part: LineRange) -> IO[bytes]:
    """A reader of the bytes of ``part`` of a seekable ``stream`` only."""
    stream.seek(part.start)
    return io.BufferedReader(_RangeReader(stream, part.end - part.start), BLOCK_READ)


class _RangeReader(io.RawIOBase):
    def __init__(self, stream: IO[bytes], length: int) -> None:
        self._stream = stream
        self._left = length

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        want = min(len(buffer), self._left)
        if want <= 0:
            return 0
        data = self._stream.read(want)
        buffer[: len(data)] = data
        self._left -= len(data)
        return len(data)


def _next_line_start(stream: IO[bytes], offset: int, size: int) -> int:
    """The offset just past the first newline at or after ``offset - 1`` (``size`` if none)."""
    position = offset - 1  # a newline right before ``offset`` makes ``offset`` a line start
    stream.seek(position)
    while position < size:
        block = stream.read(1 << 16)
        if not block:
            break
        found = block.find(b"\n")
        if found >= 0:
            return position + found + 1
        position += len(block)
    return size


def _count_newlines(stream: IO[bytes], starts: list[int]) -> list[int]:
    """The 1-based line number at each of ``starts`` (ascending line starts)."""
    numbers: list[int] = []
    stream.seek(0)
    position, newlines = 0, 0
    for start in starts:
        while position < start:
            block = stream.read(min(BLOCK, start - position))
            if not block:
                break
            newlines += block.count(b"\n")
            position += len(block)
        numbers.append(newlines + 1)
    return numbers

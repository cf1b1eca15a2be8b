"""Byte ranges of whole lines: read one after another they give back the file, each starts at a
line start, and each knows the number of its first line."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st

from app.ingest.errors import Warnings
from app.ingest.jsonl import iter_json_objects, iter_lines
from app.ingest.line_ranges import read_range, split_lines

LINES = st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=60)


@settings(max_examples=300, deadline=None)
@given(lines=LINES, end_newline=st.booleans(), part_bytes=st.integers(1, 120))
def test_ranges_cover_the_file_in_whole_lines(
    lines: list[bytes], end_newline: bool, part_bytes: int
) -> None:
    body = b"\n".join(lines) + (b"\n" if end_newline and lines else b"")
    stream = io.BytesIO(body)
    ranges = split_lines(stream, len(body), part_bytes)
    pieces = [read_range(stream, r).read() for r in ranges]
    assert b"".join(pieces) == body
    assert all(pieces) or body == b""  # no empty range
    for r in ranges:
        assert r.start == 0 or body[r.start - 1 : r.start] == b"\n"
        assert r.first_line == body[: r.start].count(b"\n") + 1
    whole = list(iter_lines(io.BytesIO(body), "f", max_line_bytes=1000))
    parted = [
        line
        for r in ranges
        for line in iter_lines(
            read_range(stream, r), "f", max_line_bytes=1000, first_line=r.first_line
        )
    ]
    assert parted == whole  # the same line numbers, text and endings


def test_a_range_ends_at_the_end_of_the_line_its_size_reaches_into() -> None:
    body = b'{"a": 1}\n' + b'{"b": "' + b"x" * 500 + b'"}\n{"c": 3}\n'
    ranges = split_lines(io.BytesIO(body), len(body), 16)
    assert [(r.first_line, r.end) for r in ranges] == [(1, len(body) - 9), (3, len(body))]
    stream = io.BytesIO(body)
    last = list(
        iter_json_objects(
            read_range(stream, ranges[1]), "s.jsonl", Warnings(), max_line_bytes=1000, first_line=3
        )
    )
    assert last == [(3, {"c": 3})]

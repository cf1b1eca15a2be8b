from __future__ import annotations

import io

import pytest

from app.ingest.errors import IngestError, Warnings
from app.ingest.jsonl import iter_json_objects, iter_lines


def test_lines_split_across_read_blocks_are_whole() -> None:
    body = b"".join(b'{"step": %d, "pad": "%s"}\n' % (i, b"x" * 5000) for i in range(600))
    lines = list(iter_lines(io.BytesIO(body), "f", max_line_bytes=10_000))
    assert len(lines) == 600
    assert all(complete for _, _, complete in lines)


def test_bare_nan_parses_and_crlf_is_tolerated() -> None:
    body = b'{"step": 1, "loss": NaN}\r\n\r\n{"step": 2, "loss": 1.5}\r\n'
    rows = list(iter_json_objects(io.BytesIO(body), "m.jsonl", Warnings(), max_line_bytes=100))
    assert [n for n, _ in rows] == [1, 3]
    assert rows[1][1] == {"step": 2, "loss": 1.5}


def test_deeply_nested_json_is_a_clear_error() -> None:
    body = b"[" * 100_000 + b"]" * 100_000 + b"\n"
    with pytest.raises(IngestError, match=r"m\.jsonl line 1: not valid JSON"):
        list(iter_json_objects(io.BytesIO(body), "m.jsonl", Warnings(), max_line_bytes=1 << 20))


def test_warnings_are_counted_past_the_limit() -> None:
    w = Warnings(limit_per_kind=2)
    for i in range(5):
        w.add(f"line {i}: bad", kind="bad")
    assert w.summary() == ["line 0: bad", "line 1: bad", "... and 3 more like: bad"]

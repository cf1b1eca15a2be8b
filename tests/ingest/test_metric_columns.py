"""The block-at-a-time metric reader gives exactly what the line-by-line reader gives: the same
table, warnings and errors (file and line), whatever the block boundaries."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.ingest import jsonl
from app.ingest.aliases import AliasTable
from app.ingest.context import ReadContext
from app.ingest.errors import Warnings
from app.ingest.jsonl import iter_json_blocks, iter_json_objects
from app.ingest.metric_columns import MetricTableBuilder
from app.ingest.run_directory import NUMERIC_KEYS, RunDirectoryReader
from app.ingest.source import DirectoryTree, Limits

LIMITS = Limits(
    max_source_bytes=1 << 30, max_members=1000, max_compression_ratio=100, max_line_bytes=1 << 20
)


def _rows(n: int, start: int = 1, **extra: Any) -> list[bytes]:
    return [
        json.dumps({"step": s, "time": 1.7e9 + s, "loss": 4.0 / s, "lr": 1e-3, **extra}).encode()
        for s in range(start, start + n)
    ]


CASES: dict[str, list[bytes]] = {
    "uniform": _rows(50),
    "extra key midway": [
        *_rows(20),
        b'{"step": 21, "loss": 1.0, "lr": 1e-3, "acc": 0.5}',
        *_rows(5, 22),
    ],
    "key order changes": [*_rows(5), b'{"lr": 1e-3, "loss": 1.0, "step": 6, "time": 1.7e9}'],
    "null value": [*_rows(5), b'{"step": 6, "loss": null, "lr": 1e-3}', *_rows(3, 7)],
    "bool value": [*_rows(5), b'{"step": 6, "loss": 1.0, "lr": true}', *_rows(3, 7)],
    "string under a free key": [
        *_rows(3),
        *[b'{"step": %d, "note": "x"}' % s for s in range(4, 12)],
    ],
    "string under loss": [*_rows(3), b'{"step": 4, "loss": "1.5"}'],
    "nested": [b'{"step": %d, "train": {"loss": 1.0, "acc": 0.5}}' % s for s in range(1, 6)],
    "two aliases of loss": [
        b'{"step": %d, "loss": 1.0, "train/loss": 2.0}' % s for s in range(1, 6)
    ],
    "alias first null": [b'{"step": 1, "loss": null, "train/loss": 2.0}'],
    "bare NaN and Infinity": [*_rows(3), b'{"step": 4, "loss": NaN, "lr": Infinity}', *_rows(2, 5)],
    "non-finite from float literal": [*_rows(3), b'{"step": 4, "loss": 1e400}'],
    "huge int value": [*_rows(3), b'{"step": 4, "loss": 1' + b"0" * 400 + b"}"],
    "float step": [*_rows(3), b'{"step": 4.0, "loss": 1.0}', b'{"step": 5, "loss": 1.0}'],
    "fractional step": [*_rows(3), b'{"step": 4.5, "loss": 1.0}'],
    "negative step": [*_rows(3), b'{"step": -1, "loss": 1.0}'],
    "step past int64": [*_rows(3), b'{"step": 9223372036854775808, "loss": 1.0}'],
    "step out of range": [*_rows(3), b'{"step": 4611686018427387904, "loss": 1.0}'],
    "bool step": [b'{"step": true, "loss": 1.0}', b'{"step": false, "loss": 1.0}'],
    "no step": [*_rows(3), b'{"loss": 1.0, "lr": 2.0}'],
    "two step keys": [
        b'{"step": %d, "global_step": %d, "loss": 1.0}' % (s, s * 2) for s in range(5)
    ],
    "time as int, then missing": [
        b'{"step": 1, "time": 5, "loss": 1.0}',
        b'{"step": 2, "loss": 1.0}',
    ],
    "infinite time": [*_rows(3), b'{"step": 4, "time": Infinity, "loss": 1.0}'],
    "string time": [*_rows(3), b'{"step": 4, "time": "now", "loss": 1.0}'],
    "only a step": [b'{"step": %d}' % s for s in range(1, 4)],
    "blank lines and CRLF": [*_rows(3), b"", b"   ", b'{"step": 9, "loss": 1.0}\r', *_rows(2, 10)],
    "bad JSON midway": [*_rows(4), b'{"step": 5, "loss": ', *_rows(3, 6)],
    "bad JSON after a bad step": [*_rows(2), b'{"step": -4, "loss": 1.0}', b"{oops"],
    "not an object": [*_rows(2), b"[1, 2]", *_rows(2, 3)],
    "commas between objects": [*_rows(2), b'{"step": 3},{"step": 4}', *_rows(2, 5)],
    "empty": [],
    "only blank": [b"", b"  "],
}
TRUNCATED = {
    "truncated last line": b"\n".join(_rows(5)) + b'\n{"step": 6, "lo',
    "whole last line without newline": b"\n".join(_rows(5)),
}


def _payload(name: str) -> bytes:
    if name in TRUNCATED:
        return TRUNCATED[name]
    return b"".join(line + b"\n" for line in CASES[name])


def _outcome(run: Any) -> tuple[Any, list[str]]:
    warnings = Warnings()
    try:
        table = run(warnings)
    except Exception as exc:
        return (type(exc).__name__, str(exc)), warnings.summary()
    columns = {
        key: (rows.tolist(), values.tobytes(), values.dtype.str)
        for key, (rows, values) in table.columns.items()
    }
    return (
        table.steps.tolist(),
        table.times.tobytes(),
        list(table.columns),
        columns,
        table.source_keys,
    ), warnings.summary()


def _reference(payload: bytes) -> tuple[Any, list[str]]:
    """The line-by-line reader: one object at a time, never as columns."""

    def run(warnings: Warnings) -> Any:
        builder = _builder(warnings)
        builder._add_uniform = lambda linenos, objs: False  # type: ignore[method-assign]
        for lineno, obj in iter_json_objects(
            io.BytesIO(payload), "metrics.jsonl", warnings, max_line_bytes=1 << 20
        ):
            builder.add([lineno], [obj])
        return builder.finish()

    return _outcome(run)


def _builder(warnings: Warnings) -> MetricTableBuilder:
    aliases = AliasTable()
    reader = RunDirectoryReader.__new__(RunDirectoryReader)
    reader.aliases = aliases
    return MetricTableBuilder(
        "metrics.jsonl", lambda key: reader._classify(key, None), warnings, NUMERIC_KEYS
    )


def _blocks(payload: bytes) -> tuple[Any, list[str]]:
    def run(warnings: Warnings) -> Any:
        builder = _builder(warnings)
        for linenos, objs in iter_json_blocks(
            io.BytesIO(payload), "metrics.jsonl", warnings, max_line_bytes=1 << 20
        ):
            builder.add(linenos, objs)
        return builder.finish()

    return _outcome(run)


@pytest.mark.parametrize("block", [1 << 20, 256, 97])
@pytest.mark.parametrize("name", [*CASES, *TRUNCATED])
def test_blocks_read_exactly_as_lines(
    name: str, block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    payload = _payload(name)
    expected = _reference(payload)
    monkeypatch.setattr(jsonl, "BLOCK", block)
    assert _blocks(payload) == expected


def test_uniform_blocks_become_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    taken: list[int] = []
    original = MetricTableBuilder._add_uniform

    def spy(self: MetricTableBuilder, linenos: Any, objs: list[dict[str, Any]]) -> bool:
        ok = original(self, linenos, objs)
        taken.append(ok)
        return ok

    monkeypatch.setattr(MetricTableBuilder, "_add_uniform", spy)
    monkeypatch.setattr(jsonl, "BLOCK", 400)
    (table, _, _, _, _), warnings = _blocks(_payload("extra key midway"))
    assert table == list(range(1, 27)) and warnings == []
    assert taken.count(True) >= len(taken) - 2 >= 1  # only the blocks around line 21 go row by row


def test_lines_longer_than_the_limit_fail_after_the_lines_before(tmp_path: Path) -> None:
    body = b"\n".join(_rows(3)) + b"\n" + b'{"step": 4, "x": "' + b"y" * 300
    rows: list[int] = []
    with pytest.raises(Exception, match=r"metrics\.jsonl line 4: line longer than 200 bytes"):
        for linenos, _ in iter_json_blocks(
            io.BytesIO(body + b'"}\n'), "metrics.jsonl", Warnings(), max_line_bytes=200
        ):
            rows.extend(linenos)
    assert rows == [1, 2, 3]


def test_the_reader_reads_a_run_directory_in_blocks(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_bytes(_payload("extra key midway"))
    warnings = Warnings()
    tree = DirectoryTree(tmp_path, warnings, LIMITS)
    reader = RunDirectoryReader(ReadContext(tree, AliasTable(), warnings, max_line_bytes=1 << 20))
    parsed = reader.read()
    assert parsed.metrics.num_rows == 26
    rows, values = parsed.metrics.columns["acc"]
    assert rows.tolist() == [20] and values.tolist() == [0.5]
    assert np.isnan(parsed.metrics.times[20])

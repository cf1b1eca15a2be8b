"""Metric logs (one JSON object a line) into a :class:`MetricTable`, a block of lines at a time.

A training loop logs the same keys at every step, so most blocks are rows of one key schema whose
values are plain numbers: such a block becomes numpy columns in a few C-level passes (one lookup of
all keys per row, a transpose, a type check and a conversion per column). Any other block (a key
missing or added, a nested object, ``null``, a bool or a string, two aliases of one metric) is read
row by row. Both give the same table, the same warnings and the same errors, naming file and line.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from app.ingest.aliases import STEP_KEYS
from app.ingest.errors import IngestError, Warnings
from app.ingest.records import MetricTable

STEP = "\x00step"
TIME = "\x00time"
MAX_STEP = 2**62
_NUMBER_TYPES = frozenset({int, float})
_INT_ONLY = frozenset({int})


class MetricTableBuilder:
    """Accumulates blocks of ``(line numbers, objects)``; :meth:`finish` returns the table.

    ``classify`` maps a logged key to its canonical name, or to :data:`STEP` / :data:`TIME`.
    A string under one of ``numeric_keys`` is an error; any other non-number is skipped with a
    warning."""

    def __init__(
        self,
        path: str,
        classify: Callable[[str], str],
        warnings: Warnings,
        numeric_keys: frozenset[str],
    ) -> None:
        self.path = path
        self.classify = classify
        self.warnings = warnings
        self.numeric_keys = numeric_keys
        self.kinds: dict[str, str] = {}
        self.num_rows = 0
        self.steps: list[np.ndarray] = []
        self.times: list[np.ndarray] = []
        self.lines: list[np.ndarray] = []
        # canonical key -> (row index parts, value parts); a row-by-row part keeps its values as
        # a list until finish(), so an overflow is reported where the per-row reader reported it
        self.columns: dict[str, tuple[list[np.ndarray], list[np.ndarray | list[Any]]]] = {}
        self.source_keys: dict[str, str] = {}

    def add(self, linenos: Sequence[int], objs: list[dict[str, Any]]) -> None:
        if objs and not self._add_uniform(linenos, objs):
            self._add_rows(linenos, objs)

    def _kind(self, key: str) -> str:
        kind = self.kinds.get(key)
        if kind is None:
            kind = self.kinds[key] = self.classify(key)
        return kind

    def _add_uniform(self, linenos: Sequence[int], objs: list[dict[str, Any]]) -> bool:
        """Take the block as columns if every row has the same keys and only valid numbers;
        False (nothing taken) otherwise."""
        keys = tuple(objs[0])
        if len(keys) < 2 or set(map(len, objs)) != {len(keys)}:
            return False
        kinds = [self._kind(key) for key in keys]
        metrics = [k for k in kinds if k is not STEP and k is not TIME]
        n_steps, n_times = sum(k is STEP for k in kinds), sum(k is TIME for k in kinds)
        if n_steps != 1 or n_times > 1 or len(set(metrics)) != len(metrics):
            return False
        try:  # a row without one of the keys (same count, other keys) raises KeyError
            columns = list(zip(*map(itemgetter(*keys), objs), strict=True))
        except KeyError:
            return False
        arrays: list[np.ndarray] = []
        for kind, column in zip(kinds, columns, strict=True):
            types = set(map(type, column))
            if kind is STEP:
                if types != _INT_ONLY:
                    return False
                try:
                    steps = np.array(column, dtype=np.int64)
                except OverflowError:
                    return False
                if int(steps.min()) < 0 or int(steps.max()) >= MAX_STEP:
                    return False
                arrays.append(steps)
                continue
            if not types <= _NUMBER_TYPES:
                return False
            try:
                values = np.array(column, dtype=np.float64)
            except OverflowError:
                return False
            if kind is TIME and not np.isfinite(values).all():
                return False
            arrays.append(values)

        n = len(objs)
        rows = np.arange(self.num_rows, self.num_rows + n, dtype=np.int64)
        times: np.ndarray | None = None
        for key, kind, array in zip(keys, kinds, arrays, strict=True):
            if kind is STEP:
                self.steps.append(array)
            elif kind is TIME:
                times = array
            else:
                self._column(kind, key)
                parts = self.columns[kind]
                parts[0].append(rows)
                parts[1].append(array)
        self.times.append(times if times is not None else np.full(n, np.nan))
        self.lines.append(np.asarray(linenos, dtype=np.int64))
        self.num_rows += n
        return True

    def _column(self, canonical: str, key: str) -> None:
        if canonical not in self.columns:
            self.columns[canonical] = ([], [])
            self.source_keys[canonical] = key

    def _add_rows(self, linenos: Sequence[int], objs: list[dict[str, Any]]) -> None:
        path = self.path
        steps: list[int] = []
        times: list[float] = []
        block: dict[str, tuple[list[int], list[Any]]] = {}
        row = self.num_rows
        for lineno, obj in zip(linenos, objs, strict=True):
            step: int | None = None
            when = math.nan
            for key, value in _items(obj):
                canonical = self._kind(key)
                if canonical is STEP:
                    step = as_step(value, path, lineno, key)
                    continue
                if canonical is TIME:
                    when = as_time(value, path, lineno, key)
                    continue
                kind = type(value)
                if kind is float or kind is int:
                    column = block.get(canonical)
                    if column is None:
                        column = block[canonical] = ([], [])
                        self._column(canonical, key)
                    elif column[0] and column[0][-1] == row:
                        continue  # two aliases of one metric on one line: keep the first
                    column[0].append(row)
                    column[1].append(value)
                elif value is None:
                    continue
                elif kind is str and canonical in self.numeric_keys:
                    raise IngestError(
                        f"'{key}' must be a number, got the string {value[:40]!r}",
                        file=path,
                        line=lineno,
                    )
                else:
                    self.warnings.add(
                        f"{path} line {lineno}: '{key}' is a {kind.__name__}, not a number;"
                        " not stored",
                        kind=f"{path}:{key}:type",
                    )
            if step is None:
                raise IngestError(
                    f"no step field (expected one of: {', '.join(STEP_KEYS)})",
                    file=path,
                    line=lineno,
                )
            steps.append(step)
            times.append(when)
            row += 1
        for canonical, (rows, values) in block.items():
            parts = self.columns[canonical]
            parts[0].append(np.asarray(rows, dtype=np.int64))
            parts[1].append(values)
        self.steps.append(np.asarray(steps, dtype=np.int64))
        self.times.append(np.asarray(times, dtype=np.float64))
        self.lines.append(np.asarray(linenos, dtype=np.int64))
        self.num_rows = row

    def finish(self) -> MetricTable:
        path = self.path
        if self.num_rows == 0:
            raise IngestError("no metric rows", file=path)
        table = MetricTable(
            steps=np.concatenate(self.steps),
            times=np.concatenate(self.times),
            source_keys=self.source_keys,
        )
        line_numbers = np.concatenate(self.lines)
        for key, (row_parts, value_parts) in self.columns.items():
            array = np.concatenate(
                [
                    v if isinstance(v, np.ndarray) else _float_array(v, path, key)
                    for v in value_parts
                ]
            )
            row_index = np.concatenate(row_parts)
            bad = ~np.isfinite(array)
            if bad.any():
                first = int(np.argmax(bad))
                self.warnings.add(
                    f"{path}: {int(bad.sum())} non-finite value(s) of '{self.source_keys[key]}'"
                    f" kept (first at line {int(line_numbers[row_index[first]])}: {array[first]})"
                )
            table.columns[key] = (row_index, array)
        return table


def _items(obj: dict[str, Any]) -> Any:
    """The object's items, with nested objects flattened to ``outer/inner`` keys."""
    for value in obj.values():
        if type(value) is dict:
            return list(_flatten(obj))
    return obj.items()


def _flatten(obj: dict[str, Any], prefix: str = "") -> Any:
    for key, value in obj.items():
        if type(value) is dict:
            yield from _flatten(value, f"{prefix}{key}/")
        else:
            yield (prefix + key if prefix else key), value


def as_step(value: Any, path: str, line: int, key: str) -> int:
    if type(value) is float and value.is_integer():
        value = int(value)
    if type(value) is not int:
        raise IngestError(f"'{key}' must be an integer, got {value!r:.40}", file=path, line=line)
    if not 0 <= value < MAX_STEP:
        raise IngestError(f"'{key}' out of range: {value}", file=path, line=line)
    return value


def as_time(value: Any, path: str, line: int, key: str) -> float:
    if type(value) not in (int, float) or not math.isfinite(value):
        raise IngestError(
            f"'{key}' must be a finite number of seconds, got {value!r:.40}", file=path, line=line
        )
    return float(value)


def _float_array(values: np.ndarray | list[Any], path: str, key: str) -> np.ndarray:
    if isinstance(values, np.ndarray):
        return values
    try:
        return np.asarray(values, dtype=np.float64)
    except OverflowError:
        raise IngestError(f"'{key}' holds a number too large for float64", file=path) from None

"""The ``log_history`` of a Hugging Face Trainer state, and its entries as metric and eval rows.

A :class:`State` is one loaded ``trainer_state.json``; a :class:`Segment` is the share of its
history one process logged (see :mod:`app.ingest.hf_resumes`). Training entries become metrics,
``eval_*`` entries evals (``eval/<name>``), the final summary (``train_runtime``...) is returned
apart. Nested values are flattened with "/"; entries at the step of the row before join that row
(unless a key repeats: the first value is kept, with a warning); entries without a ``step`` are
skipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.ingest.context import ReadContext
from app.ingest.records import MetricTable

_EVAL_PREFIXES = ("eval_", "test_", "predict_")
_SUMMARY_KEYS = ("train_runtime", "train_samples_per_second")


@dataclass
class State:
    name: str  # checkpoint folder name, or the state file's own name
    folder: str
    path: str
    doc: dict[str, Any]
    step: int
    entries: list[dict[str, Any]]
    keys: np.ndarray  # one code per entry (int64): equal entries, equal codes
    checkpoint: bool


@dataclass
class Segment:
    """One process's share of a history: entries[lo:hi] of ``state``."""

    state: State
    lo: int
    hi: int
    start_step: int
    resumed_from: str | None = None
    evidence: str | None = None


@dataclass
class Table:
    steps: list[int] = field(default_factory=list)
    columns: dict[str, tuple[list[int], list[float]]] = field(default_factory=dict)
    source_keys: dict[str, str] = field(default_factory=dict)
    _row_keys: set[str] = field(default_factory=set)

    def add(self, step: int, values: list[tuple[str, str, float]], *, new_row: bool) -> bool:
        """Add one entry; one at the step of the row before joins it. False if a key repeats."""
        if new_row or not self.steps or self.steps[-1] != step:
            self.steps.append(step)
            self._row_keys = set()
        row = len(self.steps) - 1
        clean = True
        for canonical, source, value in values:
            if canonical in self._row_keys:
                clean = False
                continue
            self._row_keys.add(canonical)
            column = self.columns.setdefault(canonical, ([], []))
            self.source_keys.setdefault(canonical, source)
            column[0].append(row)
            column[1].append(value)
        return clean

    def table(self) -> MetricTable:
        out = MetricTable(
            steps=np.asarray(self.steps, dtype=np.int64),
            times=np.full(len(self.steps), np.nan),
            source_keys=self.source_keys,
        )
        for key, (rows, values) in self.columns.items():
            out.columns[key] = (np.asarray(rows, dtype=np.int64), np.asarray(values, np.float64))
        return out


def history_tables(
    ctx: ReadContext, segments: list[Segment]
) -> tuple[Table, Table, dict[str, Any] | None]:
    """The segments' entries as train and eval rows, and the last final summary entry."""
    train, evals = Table(), Table()
    summary: dict[str, Any] | None = None
    stepless = 0
    for segment in segments:
        first_train = first_eval = True
        for entry in segment.state.entries[segment.lo : segment.hi]:
            step = entry_step(entry)
            if step is None:
                stepless += 1
                continue
            if any(k in entry for k in _SUMMARY_KEYS):
                summary = entry
                continue
            path = segment.state.path
            if any(k.startswith(_EVAL_PREFIXES) for k in entry):
                values = _values(ctx, entry, path, evaluation=True)
                clean = evals.add(step, values, new_row=first_eval)
                first_eval = False
            else:
                values = _values(ctx, entry, path, evaluation=False)
                clean = train.add(step, values, new_row=first_train)
                first_train = False
            if not clean:
                ctx.warnings.add(
                    f"{path}: several log entries at step {step} set the same metric; the"
                    " first is kept",
                    kind="hf-repeat",
                )
    if stepless:
        ctx.warnings.add(
            f"{segments[-1].state.path}: {stepless} log_history entries without a 'step'"
            " (such as predict_* results) skipped"
        )
    return train, evals, summary


def _values(
    ctx: ReadContext, entry: dict[str, Any], path: str, *, evaluation: bool
) -> list[tuple[str, str, float]]:
    out: list[tuple[str, str, float]] = []
    for key, value in _flat_items(entry):
        if key == "step" or (evaluation and key == "epoch"):
            continue
        number = _number(ctx, key, value, path)
        if number is None:
            continue
        if evaluation:
            canonical = "eval/" + (key[len("eval_") :] if key.startswith("eval_") else key)
        else:
            canonical = ctx.aliases.canonical(key)
        out.append((canonical, key, number))
    return out


def _number(ctx: ReadContext, key: str, value: Any, path: str) -> float | None:
    kind = type(value)
    if kind is float:
        return float(value)
    if kind is int:
        try:
            return float(value)
        except OverflowError:
            ctx.warnings.add(
                f"{path}: '{key}' holds a number too large for float64; not stored",
                kind=f"{path}:{key}:big",
            )
            return None
    if value is None or kind is bool:
        return None
    ctx.warnings.add(
        f"{path}: '{key}' is a {kind.__name__}, not a number; not stored",
        kind=f"{path}:{key}:type",
    )
    return None


def is_eval_or_summary(entry: dict[str, Any]) -> bool:
    return any(k.startswith(_EVAL_PREFIXES) or k in _SUMMARY_KEYS for k in entry)


def _flat_items(obj: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in obj.items():
        if isinstance(value, dict):
            out.extend(_flat_items(value, f"{prefix}{key}/"))
        else:
            out.append((prefix + str(key), value))
    return out


def entry_step(entry: dict[str, Any]) -> int | None:
    value = entry.get("step")
    if type(value) is float and value.is_integer():
        value = int(value)
    return value if type(value) is int and 0 <= value < 2**62 else None


def step_from(entries: list[dict[str, Any]], index: int) -> int | None:
    return next((s for s in (entry_step(e) for e in entries[index:]) if s is not None), None)


def last_logged_step(entries: list[dict[str, Any]]) -> int:
    return next((s for s in (entry_step(e) for e in reversed(entries)) if s is not None), 0)


def finite(value: Any) -> float | None:
    if type(value) in (int, float) and math.isfinite(value):
        return float(value)
    return None

"""Normalized records every reader produces. Readers know nothing about the database."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class MetricTable:
    """Rows of one metric log in file order, with each key's values as (row index, value) arrays."""

    steps: np.ndarray  # int64, one per row
    times: np.ndarray  # float64 unix seconds, NaN where the row has none
    columns: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    source_keys: dict[str, str] = field(default_factory=dict)  # canonical -> first logged name

    @property
    def num_rows(self) -> int:
        return int(self.steps.size)

    @property
    def num_points(self) -> int:
        return sum(int(rows.size) for rows, _ in self.columns.values())


@dataclass
class SampleTrace:
    """Dataset indices consumed by each logged step, in file order."""

    steps: np.ndarray  # int64, one per logged step
    counts: np.ndarray  # int64, ids per step
    ids: np.ndarray  # int64, concatenated

    @property
    def offsets(self) -> np.ndarray:
        out = np.zeros(self.counts.size + 1, dtype=np.int64)
        np.cumsum(self.counts, out=out[1:])
        return out


@dataclass
class EventRecord:
    kind: str
    step: int | None
    time: float | None
    payload: dict[str, Any]
    line: int | None = None


@dataclass
class ComponentRecord:
    file: str | None
    bytes: int | None


@dataclass
class CheckpointRecord:
    name: str
    step: int
    time_start: float | None = None
    time_end: float | None = None
    consumed_samples: int | None = None
    epoch: int | None = None
    consumed_in_epoch: int | None = None
    seed: int | None = None
    shuffle: bool | None = None
    dataset_size: int | None = None
    global_batch_size: int | None = None
    components: dict[str, ComponentRecord] = field(default_factory=dict)
    data_state: dict[str, Any] | None = None
    manifest: dict[str, Any] = field(default_factory=dict)


@dataclass
class ParsedRun:
    source_format: str
    metrics: MetricTable
    evals: MetricTable | None = None
    samples: SampleTrace | None = None
    events: list[EventRecord] = field(default_factory=list)
    checkpoints: list[CheckpointRecord] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    external_id: str | None = None
    dataset_size: int | None = None
    global_batch_size: int | None = None
    source_name: str | None = None  # the source it was read from, for errors about the whole run

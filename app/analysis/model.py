"""What the analyzers read: a run as plain arrays and dataclasses, assembled by a service."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

REQUIRED_COMPONENTS = ("model", "optimizer", "scheduler", "rng", "dataloader")


@dataclass
class Series:
    """One metric's effective history sorted by step, or its replayed points in log order."""

    steps: np.ndarray
    values: np.ndarray
    times: np.ndarray
    segments: np.ndarray

    @classmethod
    def empty(cls) -> Series:
        z = np.zeros(0)
        return cls(z.astype(np.int64), z, z, z.astype(np.uint16))

    @property
    def size(self) -> int:
        return int(self.steps.size)


class IdReader(Protocol):
    """The ids of a trace kept in storage, read by position in the concatenated id array."""

    def read(self, start: int, end: int) -> np.ndarray: ...  # int64 ids at [start, end)

    def max_id(self) -> int: ...  # -1 for no ids


@dataclass
class Trace:
    """Dataset indices consumed per logged step (``ids`` concatenated, ``counts`` per step).

    A paged trace (``reader`` set) holds the per-step arrays in memory and reads ids from
    storage when asked; its ``ids`` is empty. Analyzers read ids through ``id_slice``."""

    steps: np.ndarray  # int64
    counts: np.ndarray  # int64
    ids: np.ndarray  # int64; empty in a paged trace
    segments: np.ndarray  # uint16
    reader: IdReader | None = None

    @classmethod
    def paged(
        cls, steps: np.ndarray, counts: np.ndarray, segments: np.ndarray, reader: IdReader
    ) -> Trace:
        return cls(steps, counts, np.zeros(0, dtype=np.int64), segments, reader)

    @property
    def offsets(self) -> np.ndarray:
        out = np.zeros(self.counts.size + 1, dtype=np.int64)
        np.cumsum(self.counts, out=out[1:])
        return out

    @property
    def size(self) -> int:
        return int(self.steps.size)

    def id_slice(self, start: int, end: int) -> np.ndarray:
        """Ids at positions ``[start, end)`` of the concatenated id array."""
        if self.reader is None:
            return self.ids[start:end]
        return self.reader.read(start, end)

    def max_id(self) -> int:
        """The largest id (-1 for none)."""
        if self.reader is not None:
            return self.reader.max_id()
        return int(self.ids.max()) if self.ids.size else -1

    def ids_of(self, row: int) -> np.ndarray:
        offsets = self.offsets
        return self.id_slice(int(offsets[row]), int(offsets[row + 1]))


@dataclass
class SegmentInfo:
    ordinal: int
    start_step: int | None
    end_step: int | None
    resumed_from: str | None = None
    checkpoint: str | None = None  # name of the checkpoint the segment loaded
    checkpoint_step: int | None = None
    restored: list[str] | None = None
    started_at: float | None = None
    ended_at: float | None = None
    exit_reason: str | None = None

    @property
    def is_resume(self) -> bool:
        return self.ordinal > 0

    @property
    def resume_step(self) -> int | None:
        """The optimizer step the resumed state corresponds to."""
        return self.checkpoint_step if self.checkpoint_step is not None else self.start_step


@dataclass
class CheckpointInfo:
    name: str
    step: int
    save_started_at: float | None = None
    save_ended_at: float | None = None
    consumed_samples: int | None = None
    epoch: int | None = None
    consumed_in_epoch: int | None = None
    seed: int | None = None
    shuffle: bool | None = None
    dataset_size: int | None = None
    global_batch_size: int | None = None
    components: frozenset[str] = frozenset()
    data_state: dict[str, Any] | None = None

    @property
    def save_seconds(self) -> float | None:
        if self.save_started_at is None or self.save_ended_at is None:
            return None
        return self.save_ended_at - self.save_started_at


@dataclass
class TelemetryTrace:
    """One metric of one GPU on the run's wall-clock window (NaN: no reading)."""

    host: str
    gpu: str
    metric: str  # power (W), gpu_util (%), sm_active (0-1), xid, ...
    times: np.ndarray
    values: np.ndarray
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class RunData:
    segments: list[SegmentInfo]
    checkpoints: list[CheckpointInfo]
    metrics: dict[str, Series] = field(default_factory=dict)
    replayed_metrics: dict[str, Series] = field(default_factory=dict)
    trace: Trace | None = None
    replayed_trace: Trace | None = None
    dataset_size: int | None = None
    global_batch_size: int | None = None
    config: dict[str, Any] = field(default_factory=dict)
    telemetry: list[TelemetryTrace] = field(default_factory=list)

    @property
    def resumes(self) -> list[SegmentInfo]:
        return [s for s in self.segments if s.is_resume]

    def metric(self, key: str) -> Series | None:
        series = self.metrics.get(key)
        return series if series is not None and series.size else None

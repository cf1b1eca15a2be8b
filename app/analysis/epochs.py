"""The run's designed epoch layout: dataset size, global batch, samples per epoch.

Two layouts occur in practice. PyTorch's DataLoader batches within an epoch, so epochs end on
a step (with ``drop_last`` every step is full; without it the last step of each epoch is short).
Megatron's cyclic samplers treat the data as one stream: every step is a full global batch and
an epoch may end in the middle of a step. With full steps both are the stream layout, where
step ``s`` consumes stream positions ``[(s-1)*batch, s*batch)``.

Epoch boundaries come from what the run itself shows before its first resume (the first sample
id that repeats in the trace, or the position its own early manifests record), then from
declared sizes. A logged ``epoch`` field is not used: loggers often read it after the sampler
advanced, so it is off by one step at every boundary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from app.analysis.model import CheckpointInfo, RunData, Trace


@dataclass(frozen=True)
class EpochPlan:
    dataset_size: int
    global_batch_size: int
    samples_per_epoch: int
    source: str  # how the layout was derived
    stream: bool = True  # full steps; otherwise epochs end on a step, the last one short

    @property
    def steps_per_epoch(self) -> float:
        if self.stream:
            return self.samples_per_epoch / self.global_batch_size
        return float(math.ceil(self.samples_per_epoch / self.global_batch_size))

    def epoch_of_step(self, step: int) -> int:
        if self.stream:
            return ((step - 1) * self.global_batch_size) // self.samples_per_epoch
        return (step - 1) // int(self.steps_per_epoch)

    def window(self, epoch: int) -> tuple[int, int]:
        """First and last optimizer step (from 1) that consume samples of ``epoch``."""
        if self.stream:
            start, end = self.positions(epoch)
            return start // self.global_batch_size + 1, (end - 1) // self.global_batch_size + 1
        spe = int(self.steps_per_epoch)
        return epoch * spe + 1, (epoch + 1) * spe

    def positions(self, epoch: int) -> tuple[int, int]:
        """Stream positions ``[start, end)`` of ``epoch`` (stream layout)."""
        return epoch * self.samples_per_epoch, (epoch + 1) * self.samples_per_epoch

    def position(self, consumed_samples: int) -> tuple[int, int]:
        """Designed (epoch, position in epoch) after ``consumed_samples``."""
        epoch, pos = divmod(consumed_samples, self.samples_per_epoch)
        return int(epoch), int(pos)


def plan_epochs(run: RunData) -> EpochPlan | None:
    batch = _global_batch(run)
    size = _dataset_size(run)
    if batch is None or size is None or batch <= 0:
        return None
    first_resume = min((s.start_step or 0 for s in run.resumes), default=None)
    from_trace = _from_trace(run.trace, first_resume, size, batch)
    if from_trace is not None:
        samples, stream = from_trace
        return EpochPlan(size, batch, samples, "trace", stream)
    full_steps = _full_steps(run.trace, batch)
    from_manifests = _from_manifests(run.checkpoints, first_resume)
    if from_manifests is not None:
        return EpochPlan(size, batch, from_manifests, "manifests", stream=full_steps)
    sampler = run.config.get("sampler")
    drop_last = sampler.get("drop_last", True) if isinstance(sampler, dict) else True
    if (drop_last and full_steps) or size < batch:
        return EpochPlan(size, batch, max(size // batch, 1) * batch, "dataset size")
    return EpochPlan(size, batch, size, "dataset size", stream=full_steps)


def _full_steps(trace: Trace | None, batch: int) -> bool:
    """Whether every logged step consumed a full batch. PyTorch's DataLoader without
    ``drop_last`` makes the last step of each epoch short; stream samplers never do."""
    if trace is None or not trace.size:
        return True
    return bool((trace.counts == batch).all())


def _global_batch(run: RunData) -> int | None:
    if run.global_batch_size:
        return run.global_batch_size
    if run.trace is not None and run.trace.size:
        values, counts = np.unique(run.trace.counts, return_counts=True)
        return int(values[np.argmax(counts)])
    return None


def _dataset_size(run: RunData) -> int | None:
    if run.dataset_size:
        return run.dataset_size
    if run.trace is not None and run.trace.size:
        top = run.trace.max_id()
        return top + 1 if top >= 0 else None
    return None


def _from_trace(
    trace: Trace | None, first_resume: int | None, size: int, batch: int
) -> tuple[int, bool] | None:
    """Samples consumed before the first id repeats in the un-resumed head of the trace, and
    whether every step of that head was a full batch."""
    if trace is None or trace.size < 2 or int(trace.steps[0]) != 1:
        return None
    rows = trace.segments == 0
    if first_resume is not None:
        rows &= trace.steps <= first_resume
    head = np.flatnonzero(rows)
    if head.size < 2 or not bool((np.diff(trace.steps[head]) == 1).all()):
        return None
    offsets = trace.offsets
    last_row = int(head[-1])
    seen = np.zeros(size, dtype=bool)
    for row in range(last_row + 1):
        ids = trace.id_slice(int(offsets[row]), int(offsets[row + 1]))
        ids = ids[ids < size]
        repeated = seen[ids]
        if repeated.any():
            samples = int(offsets[row]) + int(np.argmax(repeated))
            # sampling with replacement repeats early; trust only a nearly full first epoch
            if samples < 0.9 * size - batch:
                return None
            full = bool((trace.counts[: row + 1] == batch).all())
            return samples, full
        seen[ids] = True
    return None


def _from_manifests(checkpoints: list[CheckpointInfo], first_resume: int | None) -> int | None:
    for ckpt in checkpoints:
        if first_resume is not None and ckpt.step > first_resume:
            break
        if ckpt.epoch and ckpt.consumed_in_epoch is not None and ckpt.consumed_samples:
            per_epoch = (ckpt.consumed_samples - ckpt.consumed_in_epoch) / ckpt.epoch
            if per_epoch > 0 and per_epoch.is_integer():
                return int(per_epoch)
    return None

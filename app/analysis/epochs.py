"""The run's designed epoch layout: dataset size, global batch, steps per epoch.

Epoch boundaries come from what the run itself shows before its first resume (the first sample
id that repeats in the trace, or the position its own early manifests record), then from
declared sizes. A logged ``epoch`` field is not used: loggers often read it after the sampler
advanced, so it is off by one step at every boundary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.analysis.model import CheckpointInfo, RunData, Trace


@dataclass(frozen=True)
class EpochPlan:
    dataset_size: int
    global_batch_size: int
    steps_per_epoch: int
    source: str  # how steps_per_epoch was derived

    @property
    def samples_per_epoch(self) -> int:
        return self.steps_per_epoch * self.global_batch_size

    def epoch_of_step(self, step: int) -> int:
        return (step - 1) // self.steps_per_epoch

    def window(self, epoch: int) -> tuple[int, int]:
        """First and last optimizer step of ``epoch`` (steps count from 1)."""
        return epoch * self.steps_per_epoch + 1, (epoch + 1) * self.steps_per_epoch

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
    from_trace = _steps_per_epoch_from_trace(run.trace, first_resume, size, batch)
    if from_trace is not None:
        return EpochPlan(size, batch, from_trace, "trace")
    from_manifests = _steps_per_epoch_from_manifests(run.checkpoints, first_resume, batch)
    if from_manifests is not None:
        return EpochPlan(size, batch, from_manifests, "manifests")
    drop_last = run.config.get("sampler", {}).get("drop_last", True)
    steps = size // batch if drop_last else -(-size // batch)
    return EpochPlan(size, batch, max(steps, 1), "dataset size")


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
    if run.trace is not None and run.trace.ids.size:
        return int(run.trace.ids.max()) + 1
    return None


def _steps_per_epoch_from_trace(
    trace: Trace | None, first_resume: int | None, size: int, batch: int
) -> int | None:
    """Steps before the first id repeats, in the un-resumed head of the trace."""
    if trace is None or trace.size < 2:
        return None
    rows = trace.segments == 0
    if first_resume is not None:
        rows &= trace.steps <= first_resume
    head_steps = trace.steps[rows]
    if head_steps.size < 2 or not bool((np.diff(head_steps) == 1).all()):
        return None
    offsets = trace.offsets
    last_row = int(np.flatnonzero(rows)[-1])
    ids = trace.ids[: offsets[last_row + 1]]
    seen = np.zeros(size, dtype=bool)
    first_step = int(head_steps[0])
    for row in range(last_row + 1):
        batch_ids = ids[offsets[row] : offsets[row + 1]]
        batch_ids = batch_ids[batch_ids < size]
        if seen[batch_ids].any():
            steps = int(trace.steps[row]) - first_step
            # sampling with replacement repeats early; trust only a nearly full first epoch
            if steps * batch >= 0.9 * size - batch and first_step == 1:
                return steps
            return None
        seen[batch_ids] = True
    return None


def _steps_per_epoch_from_manifests(
    checkpoints: list[CheckpointInfo], first_resume: int | None, batch: int
) -> int | None:
    for ckpt in checkpoints:
        if first_resume is not None and ckpt.step > first_resume:
            break
        if ckpt.epoch and ckpt.consumed_in_epoch is not None and ckpt.consumed_samples:
            per_epoch = (ckpt.consumed_samples - ckpt.consumed_in_epoch) / ckpt.epoch
            if per_epoch > 0 and per_epoch % batch == 0:
                return int(per_epoch // batch)
    return None

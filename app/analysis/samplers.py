"""Designed data orders of common samplers, replayed to find where a trace leaves its design.

torch is optional: without it only the sequential design can be replayed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from app.analysis.model import RunData, Trace

try:  # pragma: no cover - exercised when the torch extra is installed
    import torch
except ImportError:  # pragma: no cover
    torch = None  # type: ignore[assignment]

SAMPLER_KINDS = ("torch_distributed", "torch_random", "megatron_cyclic", "sequential")
# Recognising an undeclared torch sampler costs one full permutation per candidate; above this
# dataset size only a declared sampler (config "sampler") is replayed.
INFER_MAX_DATASET = 4_000_000


def _randperm(n: int, seed: int) -> np.ndarray:
    assert torch is not None
    generator = torch.Generator()
    generator.manual_seed(int(seed))
    return torch.randperm(n, generator=generator).numpy().astype(np.int64)


@dataclass
class SamplerDesign:
    kind: str
    dataset_size: int
    seed: int | None = None
    _orders: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    def epoch_order(self, epoch: int) -> np.ndarray:
        order = self._orders.get(epoch)
        if order is None:
            order = self._make(epoch)
            self._orders[epoch] = order
        return order

    def _make(self, epoch: int) -> np.ndarray:
        n = self.dataset_size
        if self.kind == "sequential":
            return np.arange(n, dtype=np.int64)
        if self.kind == "torch_distributed":
            return _randperm(n, (self.seed or 0) + epoch)
        if self.kind == "megatron_cyclic":
            return _randperm(n, epoch if self.seed is None else self.seed + epoch)
        if self.kind == "torch_random":
            assert torch is not None
            generator = torch.Generator()
            generator.manual_seed(int(self.seed or 0))
            for e in range(epoch + 1):
                order = torch.randperm(n, generator=generator).numpy().astype(np.int64)
                self._orders.setdefault(e, order)
            return self._orders[epoch]
        raise ValueError(f"unknown sampler kind {self.kind!r}")

    def describe(self) -> str:
        return self.kind if self.seed is None else f"{self.kind}, seed {self.seed}"


def find_design(run: RunData, dataset_size: int, batch: int) -> SamplerDesign | None:
    """The declared sampler (config ``sampler``), or the candidate whose first epoch matches the
    trace's first steps exactly."""
    declared = run.config.get("sampler")
    if isinstance(declared, dict) and declared.get("kind") in SAMPLER_KINDS:
        if declared["kind"] != "sequential" and torch is None:
            return None
        seed = declared.get("seed")
        return SamplerDesign(declared["kind"], dataset_size, seed if type(seed) is int else None)
    trace = run.trace
    if trace is None or trace.size < 2 or int(trace.steps[0]) != 1:
        return None
    for design in _candidates(run, dataset_size):
        if _matches_head(design, trace, batch):
            return design
    return None


def _candidates(run: RunData, n: int) -> list[SamplerDesign]:
    seeds = sorted({c.seed for c in run.checkpoints if c.seed is not None})
    candidates = [SamplerDesign("sequential", n)]
    if torch is None or n > INFER_MAX_DATASET:
        return candidates
    for seed in seeds[:3]:
        candidates.append(SamplerDesign("torch_distributed", n, seed))
        candidates.append(SamplerDesign("torch_random", n, seed))
    candidates.append(SamplerDesign("megatron_cyclic", n))
    return candidates


def _matches_head(design: SamplerDesign, trace: Trace, batch: int) -> bool:
    order = design.epoch_order(0)
    for row in range(min(2, trace.size)):
        if int(trace.steps[row]) != row + 1:
            return False
        got = np.sort(trace.ids_of(row))
        want = np.sort(order[row * batch : (row + 1) * batch])
        if not np.array_equal(got, want):
            return False
    return True


def first_divergence(
    design: SamplerDesign,
    trace: Trace,
    steps_per_epoch: int,
    batch: int,
    first_step: int,
    last_step: int,
) -> int | None:
    """First logged step in ``[first_step, last_step]`` whose ids differ from the design."""
    offsets = trace.offsets
    lo = int(np.searchsorted(trace.steps, first_step, side="left"))
    hi = int(np.searchsorted(trace.steps, last_step, side="right"))
    for row in range(lo, hi):
        if not _row_matches(design, trace, offsets, row, steps_per_epoch, batch):
            return int(trace.steps[row])
    return None


def _row_matches(
    design: SamplerDesign,
    trace: Trace,
    offsets: np.ndarray,
    row: int,
    steps_per_epoch: int,
    batch: int,
) -> bool:
    step = int(trace.steps[row])
    epoch, j = divmod(step - 1, steps_per_epoch)
    want = design.epoch_order(epoch)[j * batch : (j + 1) * batch]
    got = trace.ids[offsets[row] : offsets[row + 1]]
    if got.size != want.size:
        return False
    return bool(np.array_equal(got, want) or np.array_equal(np.sort(got), np.sort(want)))

"""Designed data orders of common samplers, replayed to find where a trace leaves its design.

torch is optional: without it only the sequential design can be replayed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from app.analysis.epochs import EpochPlan
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
    """``torch_random`` is a RandomSampler with a seeded generator: a full pass draws two
    permutations (the second, for the remainder, is empty), so epoch e is draw 2e.
    ``megatron_cyclic`` seeds each epoch with the epoch (Megatron-LM) or seed + epoch (NeMo)."""

    kind: str
    dataset_size: int
    seed: int | None = None
    seed_plus_epoch: bool = False
    draws_per_epoch: int = 2
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
            offset = self.seed if self.seed_plus_epoch and self.seed is not None else 0
            return _randperm(n, offset + epoch)
        if self.kind == "torch_random":
            assert torch is not None
            generator = torch.Generator()
            generator.manual_seed(int(self.seed or 0))
            for e in range(epoch + 1):
                order = torch.randperm(n, generator=generator).numpy().astype(np.int64)
                for _ in range(self.draws_per_epoch - 1):
                    torch.randperm(n, generator=generator)
                self._orders.setdefault(e, order)
            return self._orders[epoch]
        raise ValueError(f"unknown sampler kind {self.kind!r}")

    def describe(self) -> str:
        return self.kind if self.seed is None else f"{self.kind}, seed {self.seed}"

    def step_ids(self, plan: EpochPlan, step: int) -> np.ndarray:
        """The ids the design gives optimizer step ``step`` (from 1)."""
        batch = plan.global_batch_size
        if not plan.stream:
            spe = int(plan.steps_per_epoch)
            epoch, j = divmod(step - 1, spe)
            order = self.epoch_order(epoch)[: plan.samples_per_epoch]
            return order[j * batch : (j + 1) * batch]
        per_epoch = plan.samples_per_epoch
        start = (step - 1) * batch
        parts = []
        while start < step * batch:
            epoch, at = divmod(start, per_epoch)
            take = min(per_epoch - at, step * batch - start)
            parts.append(self.epoch_order(epoch)[at : at + take])
            start += take
        return np.concatenate(parts)


def find_design(run: RunData, plan: EpochPlan) -> SamplerDesign | None:
    """The declared sampler (config ``sampler``), or the candidate whose first epoch matches the
    trace's first steps exactly."""
    declared = run.config.get("sampler")
    if isinstance(declared, dict) and declared.get("kind") in SAMPLER_KINDS:
        if declared["kind"] != "sequential" and torch is None:
            return None
        seed = declared.get("seed")
        draws = declared.get("randperm_draws_per_epoch")
        return SamplerDesign(
            declared["kind"],
            plan.dataset_size,
            seed if type(seed) is int else None,
            seed_plus_epoch=declared.get("seed_mode") == "seed_plus_epoch",
            draws_per_epoch=draws if type(draws) is int and draws > 0 else 2,
        )
    trace = run.trace
    if trace is None or trace.size < 2 or int(trace.steps[0]) != 1:
        return None
    # Several designs agree on epoch 0 (seed + 0 is seed): only a head that reaches past an
    # epoch boundary tells them apart, so a design is used only when it alone fits the head.
    head_end = int(2 * plan.steps_per_epoch) + 1
    for resume in run.resumes:
        if resume.start_step is not None:
            head_end = min(head_end, resume.start_step)
    fitting = [
        design
        for design in _candidates(run, plan.dataset_size)
        if first_divergence(design, trace, plan, 1, 2) is None
        and first_divergence(design, trace, plan, 1, head_end) is None
    ]
    return fitting[0] if len(fitting) == 1 else None


def _candidates(run: RunData, n: int) -> list[SamplerDesign]:
    seeds = sorted({c.seed for c in run.checkpoints if c.seed is not None})
    candidates = [SamplerDesign("sequential", n)]
    if torch is None or n > INFER_MAX_DATASET:
        return candidates
    for seed in seeds[:3]:
        candidates.append(SamplerDesign("torch_distributed", n, seed))
        candidates.append(SamplerDesign("torch_random", n, seed))
        candidates.append(SamplerDesign("megatron_cyclic", n, seed, seed_plus_epoch=True))
    candidates.append(SamplerDesign("megatron_cyclic", n))
    return candidates


def first_divergence(
    design: SamplerDesign, trace: Trace, plan: EpochPlan, first_step: int, last_step: int
) -> int | None:
    """First logged step in ``[first_step, last_step]`` whose ids differ from the design (as
    sets: ranks and micro-batches may log a step's ids in any order)."""
    offsets = trace.offsets
    lo = int(np.searchsorted(trace.steps, first_step, side="left"))
    hi = int(np.searchsorted(trace.steps, last_step, side="right"))
    for row in range(lo, hi):
        step = int(trace.steps[row])
        want = design.step_ids(plan, step)
        got = trace.id_slice(int(offsets[row]), int(offsets[row + 1]))
        if got.size != want.size or not (
            np.array_equal(got, want) or np.array_equal(np.sort(got), np.sort(want))
        ):
            return step
    return None

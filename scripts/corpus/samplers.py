"""Designed data orders and a resumable batch sampler that a DataLoader drives.

Epoch orders come from torch's own samplers so that an analyzer can replay them with torch:

- ``torch_distributed``: ``DistributedSampler(shuffle=True, seed=seed)`` after ``set_epoch(e)``,
  i.e. ``randperm(N, generator seeded seed + e)``, padded to a multiple of ``world_size``; rank r
  reads ``padded[r::world_size]``, so one global batch is a contiguous slice of the padded order.
- ``torch_random``: one ``RandomSampler`` whose generator is seeded once with ``seed``; epoch e is
  its e-th full iteration. (A full iteration of ``RandomSampler`` draws two permutations: the
  second is sliced to length ``num_samples % n == 0``; epoch e is therefore draw ``2e``.)
- ``megatron_cyclic``: Megatron-LM's ``MegatronPretrainingRandomSampler`` with one data-parallel
  rank: ``randperm(N)`` under a generator seeded with the epoch (``seed_mode="epoch"``) or with
  ``seed + epoch`` (NeMo 1.x, ``seed_mode="seed_plus_epoch"``); batches run across epoch ends and
  ``epoch, offset = divmod(consumed, N)``. N is a multiple of the micro-batch size, so Megatron's
  ``bucket_size`` equals N and nothing is dropped.
- ``sequential``: ``0..N-1`` every epoch.

``drop_last`` (not for ``megatron_cyclic``) drops the tail of an epoch that does not fill a global
batch; without it the last batch of an epoch is short.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import Dataset, DistributedSampler, RandomSampler, Sampler

SAMPLER_KINDS = ("torch_distributed", "torch_random", "megatron_cyclic", "sequential")


class _Sized(Dataset[int]):
    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> int:
        return index


@dataclass(frozen=True)
class SamplerSpec:
    kind: str
    dataset_size: int
    global_batch_size: int
    seed: int
    drop_last: bool = True
    world_size: int = 1
    seed_mode: str = "epoch"  # megatron_cyclic only: "epoch" or "seed_plus_epoch"

    def __post_init__(self) -> None:
        if self.kind not in SAMPLER_KINDS:
            raise ValueError(f"unknown sampler kind {self.kind!r}")
        if self.global_batch_size % self.world_size:
            raise ValueError("the global batch must split evenly over the ranks")

    @property
    def shuffle(self) -> bool:
        return self.kind != "sequential"

    @property
    def cyclic(self) -> bool:
        return self.kind == "megatron_cyclic"

    @property
    def epoch_length(self) -> int:
        """Length of one epoch's order (DistributedSampler pads to a multiple of the ranks)."""
        if self.kind == "torch_distributed":
            return math.ceil(self.dataset_size / self.world_size) * self.world_size
        return self.dataset_size

    @property
    def usable(self) -> int:
        """Samples one epoch delivers."""
        length = self.epoch_length
        if self.drop_last and not self.cyclic:
            return length - length % self.global_batch_size
        return length

    @property
    def steps_per_epoch(self) -> float:
        if self.cyclic:
            return self.usable / self.global_batch_size
        return math.ceil(self.usable / self.global_batch_size)

    def config(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "kind": self.kind,
            "seed": self.seed,
            "drop_last": self.drop_last,
            "world_size": self.world_size,
        }
        if self.cyclic:
            doc["seed_mode"] = self.seed_mode
        if self.kind == "torch_random":
            doc["randperm_draws_per_epoch"] = 2
        return doc


_RANDOM_DRAWS: dict[tuple[int, int], tuple[RandomSampler, list[tuple[int, ...]]]] = {}


@functools.lru_cache(maxsize=512)
def epoch_order(spec: SamplerSpec, epoch: int, seed: int | None = None) -> tuple[int, ...]:
    """The order in which epoch ``epoch`` reads the dataset (global, all ranks interleaved)."""
    seed = spec.seed if seed is None else seed
    n = spec.dataset_size
    if spec.kind == "sequential":
        return tuple(range(n))
    if spec.kind == "torch_distributed":
        ranks = []
        for rank in range(spec.world_size):
            per_rank: DistributedSampler[int] = DistributedSampler(
                _Sized(n), num_replicas=spec.world_size, rank=rank, shuffle=True, seed=seed
            )
            per_rank.set_epoch(epoch)
            ranks.append(list(per_rank))
        width = spec.world_size
        return tuple(ranks[i % width][i // width] for i in range(width * len(ranks[0])))
    if spec.kind == "megatron_cyclic":
        generator = torch.Generator()
        generator.manual_seed(epoch if spec.seed_mode == "epoch" else seed + epoch)
        return tuple(torch.randperm(n, generator=generator).tolist())
    key = (n, seed)
    if key not in _RANDOM_DRAWS:
        generator = torch.Generator()
        generator.manual_seed(seed)
        _RANDOM_DRAWS[key] = (RandomSampler(_Sized(n), generator=generator), [])
    sampler, orders = _RANDOM_DRAWS[key]
    while len(orders) <= epoch:
        orders.append(tuple(sampler))  # one full iteration of the one sampler per epoch
    return orders[epoch]


class ResumableBatchSampler(Sampler[list[int]]):
    """Yields global batches of dataset ids forever, keeping the position a checkpoint saves.

    The counters advance before a batch is handed out, so right after an epoch's last batch
    ``epoch`` already names the next epoch. The order of an epoch is fixed when its first batch is
    read: from ``shuffle_epoch`` (what ``set_epoch`` sets, like DistributedSampler) for
    ``torch_distributed``, from the epoch counter for the others.
    """

    def __init__(self, spec: SamplerSpec, *, seed: int | None = None, epoch: int = 0) -> None:
        self.spec = spec
        self.seed = spec.seed if seed is None else seed
        self.epoch = epoch
        self.pos = 0
        self.shuffle_epoch = 0  # DistributedSampler.epoch: 0 in a new process until set_epoch
        self.order_key: int | None = None  # key of the epoch being read; None = not started
        # Resume-bug hooks (all inert by default):
        self.epoch_start = 0  # where every new epoch starts reading (offset re-applied)
        self.replay_tail = False  # with epoch_start: the epoch keeps its length, tail re-read
        self.end_override: int | None = None  # the current epoch ends here (by batch count)

    def set_epoch(self, epoch: int) -> None:
        self.shuffle_epoch = epoch

    # -- state ------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "shuffle": self.spec.shuffle,
            "epoch": self.epoch,
            "consumed_in_epoch": self.pos,
        }

    def load_state_dict(self, state: dict[str, Any], *, sets_epoch: bool = True) -> None:
        """Restore a saved position; the in-flight epoch keeps its saved order.

        ``sets_epoch=False`` is a restore that leaves the sampler's own epoch attribute alone
        (it stays 0 in a new process), so later epochs depend on the loop calling set_epoch.
        """
        self.seed = int(state["seed"])
        self.epoch = int(state["epoch"])
        self.pos = int(state["consumed_in_epoch"])
        self.order_key = self.epoch if self.pos > 0 else None
        if sets_epoch:
            self.shuffle_epoch = self.epoch
        self.normalize()

    def normalize(self) -> None:
        """Move past an epoch end if the position is already there (carry into the next one)."""
        if self.spec.cyclic:
            while self.pos >= self._end():
                self.pos -= self._end()
                self.epoch += 1
                self.order_key = None
            return
        while self._remaining() < self._min_batch():
            self._advance()

    # -- iteration --------------------------------------------------------------------------

    def __iter__(self) -> Iterator[list[int]]:
        while True:
            yield self.next_batch()

    def next_batch(self) -> list[int]:
        gbs = self.spec.global_batch_size
        ids: list[int] = []
        while len(ids) < gbs:
            take = min(gbs - len(ids), self._end() - self.pos)
            order = self._order()
            if self.pos + take <= self.spec.usable:
                ids.extend(order[self.pos : self.pos + take])
            else:  # replay_tail: positions past the end re-read the tail
                shift = self.epoch_start
                ids.extend(
                    order[p if p < self.spec.usable else p - shift]
                    for p in range(self.pos, self.pos + take)
                )
            self.pos += take
            if self.spec.cyclic:
                if self.pos >= self._end():
                    self._advance()
                continue
            if self._remaining() < self._min_batch():
                self._advance()
            break
        return ids

    def _min_batch(self) -> int:
        return self.spec.global_batch_size if self.spec.drop_last else 1

    def _end(self) -> int:
        if self.end_override is not None:
            return self.end_override
        if self.replay_tail:
            return self.spec.usable + self.epoch_start
        return self.spec.usable

    def _remaining(self) -> int:
        return self._end() - self.pos

    def _order(self) -> tuple[int, ...]:
        if self.order_key is None:  # an epoch's order is fixed when its first batch is read
            distributed = self.spec.kind == "torch_distributed"
            self.order_key = self.shuffle_epoch if distributed else self.epoch
        return epoch_order(self.spec, self.order_key, self.seed)

    def _advance(self) -> None:
        self.epoch += 1
        self.pos = self.epoch_start
        self.end_override = None
        self.order_key = None


def design_trace(spec: SamplerSpec, steps: int) -> list[list[int]]:
    """The ids each optimizer step 1..steps is designed to read (index 0 is step 1)."""
    sampler = ResumableBatchSampler(spec)
    trace = []
    for _ in range(steps):
        trace.append(sampler.next_batch())
        sampler.set_epoch(sampler.epoch)
    return trace


@dataclass(frozen=True)
class Batch:
    ids: list[int]
    x: torch.Tensor
    y: torch.Tensor


class IndexedTensors(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Map-style dataset with a batched ``__getitems__`` (the DataLoader fetcher uses it)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x = x
        self.y = y

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index], self.y[index]

    def __getitems__(self, ids: list[int]) -> Batch:
        rows = torch.as_tensor(ids, dtype=torch.long)
        return Batch(list(ids), self.x[rows], self.y[rows])


def keep_batch(batch: Any) -> Batch:
    """``collate_fn``: ``__getitems__`` already built the batch."""
    return batch

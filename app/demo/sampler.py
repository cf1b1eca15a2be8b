"""A resumable batch sampler with drop_last, modelled on torch's DistributedSampler.

The order of an epoch is a permutation from a generator seeded with ``seed + shuffle_epoch`` (or
``0..n-1`` without shuffling). ``shuffle_epoch`` changes only through :meth:`set_epoch`, which the
training loop is expected to call at every epoch boundary.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class EpochSampler:
    def __init__(
        self, dataset_size: int, batch_size: int, *, seed: int, shuffle: bool, epoch: int = 0
    ) -> None:
        if dataset_size < batch_size:
            raise ValueError("the dataset is smaller than one batch")
        self.dataset_size = dataset_size
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = epoch  # the loader's epoch counter (what gets logged and saved)
        self.consumed_in_epoch = 0
        self.shuffle_epoch = epoch
        self.epoch_start = 0  # where each new epoch begins reading; 0 unless a resume went wrong
        self._order_key: tuple[int, int] | None = None
        self._order: np.ndarray | None = None

    @property
    def usable(self) -> int:
        """Samples an epoch can deliver: drop_last leaves ``dataset_size % batch_size`` out."""
        return self.dataset_size - self.dataset_size % self.batch_size

    @property
    def steps_per_epoch(self) -> int:
        return self.usable // self.batch_size

    def set_epoch(self, epoch: int) -> None:
        self.shuffle_epoch = epoch

    def order(self) -> np.ndarray:
        """Dataset indices in the order the current epoch reads them."""
        key = (self.seed, self.shuffle_epoch) if self.shuffle else None
        if self._order is None or key != self._order_key:
            if key is None:
                self._order = np.arange(self.dataset_size)
            else:
                generator = np.random.default_rng(self.seed + self.shuffle_epoch)
                self._order = generator.permutation(self.dataset_size)
            self._order_key = key
        return self._order

    def next_batch(self) -> tuple[np.ndarray, bool]:
        """The next batch of ids, and whether it was the last of its epoch.

        The counters advance before the caller sees them, so after an epoch's last batch
        ``epoch`` already names the next epoch.
        """
        start = self.consumed_in_epoch
        ids = self.order()[start : start + self.batch_size].copy()
        self.consumed_in_epoch += self.batch_size
        last = self.consumed_in_epoch + self.batch_size > self.usable
        if last:
            self.epoch += 1
            self.consumed_in_epoch = self.epoch_start
        return ids, last

    def state_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "shuffle": self.shuffle,
            "epoch": self.epoch,
            "consumed_in_epoch": self.consumed_in_epoch,
        }

    def load_state_dict(self, state: dict[str, Any], *, offset_every_epoch: bool = False) -> None:
        """Restore a saved position.

        ``offset_every_epoch`` reproduces a Megatron-style bug: the sampler remembers the in-epoch
        offset it was built with and starts every later epoch there too, skipping the epoch head.
        """
        self.seed = int(state["seed"])
        self.shuffle = bool(state["shuffle"])
        self.epoch = int(state["epoch"])
        self.consumed_in_epoch = int(state["consumed_in_epoch"])
        self.set_epoch(self.epoch)
        self.epoch_start = self.consumed_in_epoch if offset_every_epoch else 0

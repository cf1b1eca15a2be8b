"""Record which dataset indices each optimizer step consumed, for PyTorch data loading.

Two ways, both without importing torch until it is needed:

* :class:`SampleIdDataset` returns each item's index with the item, so the index travels inside
  the batch the training loop receives. Correct with any ``num_workers`` and prefetching: it is
  the recommended path.
* :class:`RecordingSampler` remembers what a sampler yielded. A DataLoader with workers asks its
  sampler for indices ahead of training (``prefetch_factor`` batches per worker), so "everything
  since the last step" is only what the step consumed with ``num_workers=0``.

:class:`StepRecorder` collects ids over micro-batches (gradient accumulation) and writes one
``samples.jsonl`` line per optimizer step, gathering every rank's ids under torch.distributed.
"""

from __future__ import annotations

import operator
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol


class SampleSink(Protocol):
    def samples(self, step: int, ids: Iterable[Any]) -> None: ...


def as_ids(value: Any) -> list[int]:
    """A flat list of ints from an int, a list, a numpy array or a tensor."""
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        value = tolist()
    try:
        return [operator.index(value)]
    except TypeError:
        pass
    return [operator.index(i) for i in value]


class RecordingSampler:
    """Wraps a ``Sampler`` or ``BatchSampler`` and remembers the indices it yields.

    Everything else (``set_epoch``, ``state_dict``, ``load_state_dict``, ``__len__``, attributes)
    is forwarded to the wrapped sampler. Exact with ``num_workers=0``; with workers pass
    ``count`` (samples the step consumed) or use :class:`SampleIdDataset`.
    """

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler
        self._pending: list[int] = []
        self._lock = threading.Lock()

    def __iter__(self) -> Iterator[Any]:
        for item in self.sampler:
            ids = as_ids(item)
            with self._lock:
                self._pending.extend(ids)
            yield item

    def __len__(self) -> int:
        return len(self.sampler)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("sampler", "_pending", "_lock"):
            raise AttributeError(name)
        return getattr(self.sampler, name)

    def __getstate__(self) -> dict[str, Any]:
        return {"sampler": self.sampler, "_pending": list(self._pending)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def take(self, count: int | None = None) -> list[int]:
        """Remove and return the recorded ids: all of them, or the first ``count``."""
        with self._lock:
            if count is None or count >= len(self._pending):
                taken, self._pending = self._pending, []
            else:
                taken, self._pending = self._pending[:count], self._pending[count:]
        return taken

    def discard(self) -> None:
        """Forget what was recorded (indices skipped to reach a resume position, say)."""
        self.take()

    def record_step(self, logger: SampleSink, step: int, count: int | None = None) -> list[int]:
        """Write the ids taken since the last call as optimizer step ``step``'s samples."""
        ids = self.take(count)
        logger.samples(step, ids)
        return ids


class SampleIdDataset:
    """Map-style dataset wrapper whose items carry their index.

    With ``key=None`` an item is ``(index, item)``, so the default collate gives
    ``(ids, batch)``; with a ``key`` a mapping item gets the index added under that key.
    """

    def __init__(self, dataset: Any, key: str | None = None) -> None:
        self.dataset = dataset
        self.key = key

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        return self._tag(index, self.dataset[index])

    def __getitems__(self, indices: list[int]) -> list[Any]:
        inner = getattr(self.dataset, "__getitems__", None)
        items = inner(indices) if callable(inner) else [self.dataset[i] for i in indices]
        return [self._tag(i, item) for i, item in zip(indices, items, strict=True)]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("dataset", "key"):
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def _tag(self, index: int, item: Any) -> Any:
        index = operator.index(index)
        if self.key is None:
            return index, item
        if not isinstance(item, Mapping):
            raise TypeError(
                f"SampleIdDataset(key={self.key!r}) needs mapping items, got {type(item).__name__}"
            )
        return {**item, self.key: index}


class StepRecorder:
    """Collects sample ids over the micro-batches of an optimizer step and logs them once.

    Under an initialized ``torch.distributed`` group (``gather=None`` detects it) every rank
    must call :meth:`record`; the ids of all ranks are gathered and only a rank with a logger
    writes them (pass ``logger=None`` on the other ranks).
    """

    def __init__(self, logger: SampleSink | None, *, gather: bool | None = None) -> None:
        self.logger = logger
        self.gather = gather
        self._pending: list[int] = []

    def add(self, ids: Any) -> None:
        """Add one micro-batch's ids (list, numpy array or tensor)."""
        self._pending.extend(as_ids(ids))

    def record(self, step: int) -> list[int]:
        """Log the ids added since the last call as step ``step``; return them (all ranks')."""
        ids, self._pending = self._pending, []
        if self._should_gather():
            ids = gather_ids(ids)
        if self.logger is not None:
            self.logger.samples(step, ids)
        return ids

    def discard(self) -> None:
        self._pending = []

    def _should_gather(self) -> bool:
        if self.gather is False:
            return False
        world = _world_size()
        if self.gather and world is None:
            raise RuntimeError("StepRecorder(gather=True) needs an initialized torch.distributed")
        return world is not None and world > 1


def gather_ids(ids: list[int]) -> list[int]:
    """Every rank's ids, concatenated in rank order (a collective: all ranks must call it)."""
    import torch.distributed as dist

    parts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(parts, ids)
    return [i for part in parts for i in part]


def _world_size() -> int | None:
    dist = sys.modules.get("torch.distributed")  # never initialized unless torch was imported
    if dist is None or not (dist.is_available() and dist.is_initialized()):
        return None
    return int(dist.get_world_size())

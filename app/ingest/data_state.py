"""Where a saved data-loader state says the run stood in its data: epoch, samples into the epoch,
shuffle seed and samples consumed in all.

:func:`position_from_state` recognises the state dicts of

- the run-directory sampler (``sampler.json``: ``seed``, ``shuffle``, ``epoch``,
  ``consumed_in_epoch``), counted in samples;
- PyTorch Lightning checkpoints (``loops.fit_loop``: ``epoch_progress`` and
  ``epoch_loop.batch_progress``, each ``total``/``current`` x
  ``ready/started/processed/completed``), counted in loader batches;
- torchdata ``StatefulDataLoader.state_dict()`` (``_num_yielded``, ``_sampler_iter_yielded`` and
  ``_sampler_iter_state``, or with workers a ``_snapshot``), counted in batches, with samples where
  the sampler state has them;
- MosaicML Streaming (``epoch``, ``sample_in_epoch``, ``shuffle_seed``), counted in samples;
- OLMo-core data loaders (``batches_processed``, ``tokens_processed``, ``seed``, 1-based ``epoch``),
  counted in global batches;
- Hugging Face / accelerate skips (``skip_batches``, or ``global_step`` with ``steps_per_epoch``);
- Megatron(-Bridge) train state (``consumed_train_samples``), counted in samples.

Counts in batches become samples through ``batch_size`` (samples in one loader batch of one
process) times ``world_size`` (data-parallel processes, each reading its own share); without a
``batch_size`` they stay unknown. Epochs are 0-based.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# pickled_scalars moved to pickle_scan; re-exported for callers that import it from here.
from app.ingest.pickle_scan import pickled_scalars as pickled_scalars

# torch's CPU generator state (mt19937) is 5056 bytes, a CUDA one 16; both begin with the seed.
_GENERATOR_STATE_SIZES = (5056, 16)


@dataclass(frozen=True)
class DataPosition:
    epoch: int | None
    consumed_in_epoch: int | None  # samples
    seed: int | None
    consumed_samples: int | None
    source: str  # which kind of state it was read from


def position_from_state(
    state: Mapping[str, Any], *, batch_size: int | None = None, world_size: int = 1
) -> DataPosition | None:
    """The data position a saved loader state records, or None for a state it does not know."""
    if not isinstance(state, Mapping):
        return None
    per_batch = batch_size * world_size if batch_size else None
    for probe in _PROBES:
        position = probe(state, per_batch, world_size)
        if position is not None:
            return _first_epoch_total(position)
    return None


def _sampler_json(state: Mapping[str, Any], _: int | None, __: int) -> DataPosition | None:
    if "consumed_in_epoch" not in state:
        return None
    return DataPosition(
        epoch=_int(state.get("epoch")),
        consumed_in_epoch=_int(state.get("consumed_in_epoch")),
        seed=_int(state.get("seed")),
        consumed_samples=_int(state.get("consumed_samples")),
        source="sampler",
    )


def _lightning(state: Mapping[str, Any], per_batch: int | None, _: int) -> DataPosition | None:
    """A Lightning checkpoint, its ``loops`` or its ``fit_loop``. The counters are loader batches;
    ``processed`` counts batches trained on (a checkpoint saved in ``on_train_batch_end`` has
    ``completed`` one behind). After an epoch's last batch the position is the next epoch's
    start."""
    loops = state.get("loops")
    fit = state
    if isinstance(loops, Mapping):
        fit = loops.get("fit_loop", {})
    elif isinstance(state.get("fit_loop"), Mapping):
        fit = state["fit_loop"]
    epochs = _get(fit, "epoch_progress", "current")
    batches = fit.get("epoch_loop.batch_progress") if isinstance(fit, Mapping) else None
    if not isinstance(epochs, Mapping) or not isinstance(batches, Mapping):
        return None
    epoch = _int(epochs.get("completed"))
    in_epoch = _int(_get(batches, "current", "processed"))
    total = _int(_get(batches, "total", "processed"))
    if batches.get("is_last_batch") is True and epoch is not None:
        epoch, in_epoch = epoch + 1, 0
    return DataPosition(
        epoch=epoch,
        consumed_in_epoch=_times(in_epoch, per_batch),
        seed=None,
        consumed_samples=_times(total, per_batch),
        source="lightning",
    )


def _stateful_dataloader(
    state: Mapping[str, Any], per_batch: int | None, world_size: int
) -> DataPosition | None:
    """torchdata's StatefulDataLoader. Its counters restart with every epoch's iterator and it
    keeps no epoch number (a ``StatefulDistributedSampler`` inside it does). With workers the
    state is the last snapshot plus the batches yielded since; the sampler itself ran ahead by
    the prefetch, so only the snapshot's counts are used. Sample counts are per process."""
    snapshot = state.get("_snapshot")
    if isinstance(snapshot, Mapping):
        main = _mapping(snapshot.get("_main_snapshot"))
        at_snapshot = _int(snapshot.get("_snapshot_step"))
        since = _int(state.get("_steps_since_snapshot")) or 0
    elif "_num_yielded" in state or "_sampler_iter_yielded" in state:
        main = state
        at_snapshot = _int(state.get("_num_yielded", state.get("_sampler_iter_yielded")))
        since = 0
    else:
        return None
    sampler = _mapping(main.get("_sampler_iter_state"))
    inner = _mapping(sampler.get("sampler_iter_state")) or sampler
    samples = _int(sampler.get("samples_yielded"))
    if samples is None and _int(inner.get("yielded")) == at_snapshot:
        samples = at_snapshot  # the sampler is the index sampler: one index per batch
    consumed: int | None = None
    if samples is not None and (at_snapshot or not since):
        per = samples // at_snapshot if at_snapshot else 0
        consumed = (samples + since * per) * world_size
    elif at_snapshot is not None:
        consumed = _times(at_snapshot + since, per_batch)
    return DataPosition(
        epoch=_int(_get(sampler, "sampler_state", "epoch")),
        consumed_in_epoch=consumed,
        seed=_generator_seed(inner.get("generator")),
        consumed_samples=None,
        source="torchdata",
    )


def _streaming(state: Mapping[str, Any], _: int | None, __: int) -> DataPosition | None:
    if "sample_in_epoch" not in state:
        return None
    return DataPosition(
        epoch=_int(state.get("epoch")),
        consumed_in_epoch=_int(state.get("sample_in_epoch")),
        seed=_int(state.get("shuffle_seed")),
        consumed_samples=None,
        source="streaming",
    )


def _olmo_core(state: Mapping[str, Any], per_batch: int | None, _: int) -> DataPosition | None:
    """OLMo-core counts global batches within the current epoch; its epochs start at 1."""
    if "batches_processed" not in state:
        return None
    epoch = _int(state.get("epoch"))
    return DataPosition(
        epoch=None if epoch is None else epoch - 1,
        consumed_in_epoch=_times(_int(state.get("batches_processed")), per_batch),
        seed=_int(state.get("seed")),
        consumed_samples=None,
        source="olmo_core",
    )


def _skip(state: Mapping[str, Any], per_batch: int | None, _: int) -> DataPosition | None:
    """Hugging Face / accelerate style: the batches a resume skips. The Trainer skips
    ``global_step % steps_per_epoch`` optimizer steps of ``gradient_accumulation_steps`` batches."""
    seed = _int(state.get("seed", state.get("initial_seed")))
    if "skip_batches" in state:
        return DataPosition(
            epoch=_int(state.get("epoch")),
            consumed_in_epoch=_times(_int(state.get("skip_batches")), per_batch),
            seed=seed,
            consumed_samples=None,
            source="skip_batches",
        )
    step = _int(state.get("global_step"))
    per_epoch = _int(state.get("steps_per_epoch", state.get("num_update_steps_per_epoch")))
    if step is None or not per_epoch:
        return None
    accumulation = _int(state.get("gradient_accumulation_steps")) or 1
    epoch, in_epoch = divmod(step, per_epoch)
    return DataPosition(
        epoch=epoch,
        consumed_in_epoch=_times(in_epoch * accumulation, per_batch),
        seed=seed,
        consumed_samples=_times(step * accumulation, per_batch),
        source="global_step",
    )


def _megatron(state: Mapping[str, Any], _: int | None, __: int) -> DataPosition | None:
    if "consumed_train_samples" not in state:
        return None
    return DataPosition(
        epoch=None,
        consumed_in_epoch=None,
        seed=_int(state.get("seed")),
        consumed_samples=_int(state.get("consumed_train_samples")),
        source="megatron",
    )


_Probe = Callable[[Mapping[str, Any], int | None, int], DataPosition | None]
_PROBES: tuple[_Probe, ...] = (
    _sampler_json,
    _lightning,
    _stateful_dataloader,
    _streaming,
    _olmo_core,
    _skip,
    _megatron,
)


def _first_epoch_total(position: DataPosition) -> DataPosition:
    """In epoch 0 the samples consumed in all are the samples consumed in the epoch."""
    if position.consumed_samples is None and position.epoch == 0:
        return DataPosition(
            position.epoch,
            position.consumed_in_epoch,
            position.seed,
            position.consumed_in_epoch,
            position.source,
        )
    return position


def _get(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _int(value: Any) -> int | None:
    """An integer from an int, an integral float, or a 0-d tensor / numpy scalar."""
    if hasattr(value, "item") and callable(value.item):
        try:
            value = value.item()
        except (ValueError, RuntimeError):
            return None
    if type(value) is float and value.is_integer():
        return int(value)
    return value if type(value) is int else None


def _times(count: int | None, per: int | None) -> int | None:
    return None if count is None or per is None else count * per


def _generator_seed(state: Any) -> int | None:
    """The initial seed at the head of a saved ``torch.Generator`` state."""
    if hasattr(state, "tolist"):
        state = state.tolist()
    if isinstance(state, list) and all(type(b) is int and 0 <= b < 256 for b in state[:8]):
        try:
            state = bytes(state)
        except (ValueError, TypeError):  # a later element that is not a byte
            return None
    if not isinstance(state, (bytes, bytearray)) or len(state) not in _GENERATOR_STATE_SIZES:
        return None
    return int.from_bytes(state[:8], "little")

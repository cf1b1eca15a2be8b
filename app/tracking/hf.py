"""Hugging Face ``Trainer`` callback that writes a Runwatch run directory.

    callback = RunwatchCallback("runs/exp1")
    trainer = Trainer(..., train_dataset=callback.track(train_dataset), callbacks=[callback])

Importing this module imports transformers.
"""

from __future__ import annotations

import math
import os
import re
import time
import warnings
from collections import deque
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from app.tracking.logger import RunLogger
from app.tracking.torch_helpers import StepRecorder

_MODEL_FILE = re.compile(
    r"^(model|pytorch_model|adapter_model|tf_model|flax_model)"
    r"(-\d+-of-\d+)?\.(safetensors|bin|h5|msgpack)(\.index\.json)?$"
)
_RNG_FILE = re.compile(r"^rng_state(_\d+)?\.pth$")
_FIXED_FILES = {
    "optimizer.pt": "optimizer",
    "optimizer.bin": "optimizer",
    "scheduler.pt": "scheduler",
    "scaler.pt": "scaler",
    # The Trainer resumes its data position from the global step stored here (it skips the
    # batches the interrupted epoch already trained on), so this file is the loader state.
    "trainer_state.json": "dataloader",
}
SUMMARY_KEYS = ("train_runtime", "train_samples_per_second", "total_flos")


def checkpoint_components(folder: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """Components of a Trainer checkpoint folder: ``{name: {"file", "bytes"}}``."""
    files: dict[str, list[Path]] = {}
    for path in sorted(Path(folder).iterdir()):
        if not path.is_file():
            continue
        name = _FIXED_FILES.get(path.name)
        if name is None and _MODEL_FILE.match(path.name):
            name = "model"
        elif name is None and _RNG_FILE.match(path.name):
            name = "rng"
        if name is not None:
            files.setdefault(name, []).append(path)
    return {
        name: {"file": paths[0].name, "bytes": sum(p.stat().st_size for p in paths)}
        for name, paths in files.items()
    }


class RunwatchCallback(TrainerCallback):
    """Writes process start/exit, per-log metrics, evaluations, checkpoint manifests and
    (through :meth:`track`) the sample ids of every optimizer step.

    ``run`` is a :class:`RunLogger` or a run directory (a logger is then made on the main
    process with ``logger_options``, e.g. ``server=`` to stream, whose token defaults to
    ``RUNWATCH_TOKEN``; it is closed when training ends). Only the world's main process writes.
    Set ``logging_steps=1`` for a metrics line per optimizer step.
    """

    def __init__(self, run: RunLogger | str | os.PathLike[str], **logger_options: Any) -> None:
        self._given = run if isinstance(run, RunLogger) else None
        self._run_dir = None if isinstance(run, RunLogger) else run
        self._options = logger_options
        self.logger: RunLogger | None = self._given
        self._fetched: deque[list[int]] | None = None
        self._recorder: StepRecorder | None = None
        self._micro_batches = 0
        self._mark = time.time()
        self._warned = False
        self._dataloader: Any = None

    def track(self, dataset: Any) -> Any:
        """Wrap the training dataset so each step's sample ids are recorded (needs
        ``dataloader_num_workers=0``, the Trainer's default)."""
        self._fetched = deque()
        return _FetchRecordingDataset(dataset, self._fetched)

    def close(self) -> None:
        """Close a logger this callback made (the end of training does it)."""
        if self._given is None and self.logger is not None:
            self.logger.close()

    # -- hooks --------------------------------------------------------------------------------

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self._dataloader = kw.get("train_dataloader")
        main = state.is_world_process_zero
        if main and self.logger is None and self._run_dir is not None:
            self.logger = RunLogger(self._run_dir, **self._options)
        if self._fetched is not None:
            self._fetched.clear()
            if args.dataloader_num_workers > 0:
                self._warn("sample ids are not recorded with dataloader_num_workers > 0")
                self._fetched = None
            else:
                self._recorder = StepRecorder(self.logger if main else None)
        self._micro_batches = 0
        if not main or self.logger is None:
            return
        self.logger.set_config(_config(args, self._dataloader))
        resumed_from, restored = None, None
        if state.global_step > 0:
            folder = _resume_folder(args, state.global_step)
            resumed_from = folder or f"checkpoint-{state.global_step}"
            if folder is not None:
                restored = sorted(checkpoint_components(folder))
                if args.ignore_data_skip and "dataloader" in restored:
                    restored.remove("dataloader")
        self.logger.start(state.global_step, resumed_from=resumed_from, restored=restored)
        self._mark = time.time()

    def on_substep_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self._micro_batches += 1

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        count, self._micro_batches = self._micro_batches + 1, 0
        if self._fetched is not None and self._recorder is not None:
            if len(self._fetched) < count:
                self._warn("the Trainer consumed batches the dataset did not fetch; ids not logged")
                self._fetched = None
            else:
                for _ in range(count):
                    self._recorder.add(self._fetched.popleft())
                self._recorder.record(state.global_step)
        self._mark = time.time()

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kw: Any,
    ) -> None:
        if self.logger is None or not state.is_world_process_zero or not logs:
            return
        numbers = {k: v for k, v in logs.items() if _is_number(v)}
        if any(key.startswith("eval_") for key in numbers):
            numbers.pop("epoch", None)
            self.logger.eval(state.global_step, **numbers)
        elif not any(key in numbers for key in SUMMARY_KEYS):
            if "learning_rate" in numbers:
                numbers["lr"] = numbers.pop("learning_rate")
            if "epoch" in numbers:
                numbers["epoch"] = math.floor(numbers["epoch"] + 1e-9)
            self.logger.metrics(state.global_step, **numbers)
        self._mark = time.time()

    def on_evaluate(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self._mark = time.time()

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self.logger is None or not state.is_world_process_zero:
            return
        step = state.global_step
        folder = Path(args.output_dir or ".") / f"checkpoint-{step}"
        if not folder.is_dir():
            return
        started, ended = self._mark, time.time()
        self.logger.event("checkpoint_save_start", step, time=started)
        self.logger.event("checkpoint_save_end", step, time=ended)
        batch = _global_batch_size(args)
        position = _position(args, state, self._dataloader)
        sampler = _sampler_config(args, self._dataloader)
        self.logger.checkpoint(
            folder.name,
            step,
            components=checkpoint_components(folder),
            consumed_samples=step * batch,
            epoch=position[0],
            consumed_in_epoch=position[1],
            seed=sampler.get("seed") if sampler else None,
            shuffle=sampler["kind"] != "sequential" if sampler else None,
            dataset_size=_dataset_size(self._dataloader),
            global_batch_size=batch,
            time_start=started,
            time_end=ended,
        )

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self.logger is None or not state.is_world_process_zero:
            return
        self.logger.exit(state.global_step, reason="finished")
        self.close()

    def _warn(self, message: str) -> None:
        if not self._warned:
            warnings.warn(f"Runwatch: {message}", RuntimeWarning, stacklevel=3)
            self._warned = True


class _FetchRecordingDataset:
    """Records each batch of indices the DataLoader fetches in this process (in order)."""

    def __init__(self, dataset: Any, fetched: deque[list[int]]) -> None:
        self.dataset = dataset
        self._fetched = fetched

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: list[int]) -> list[Any]:
        self._fetched.append([int(i) for i in indices])
        inner = getattr(self.dataset, "__getitems__", None)
        return list(inner(indices)) if callable(inner) else [self.dataset[i] for i in indices]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("dataset", "_fetched"):
            raise AttributeError(name)
        return getattr(self.dataset, name)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _resume_folder(args: TrainingArguments, step: int) -> str | None:
    """The checkpoint folder a resumed Trainer loaded: ``args.resume_from_checkpoint`` when it
    names one, else ``<output_dir>/checkpoint-<global step>``."""
    given = args.resume_from_checkpoint
    candidates = [given] if isinstance(given, str) and given else []
    candidates.append(os.path.join(args.output_dir or ".", f"checkpoint-{step}"))
    return next((c for c in candidates if os.path.isdir(c)), None)


def _global_batch_size(args: TrainingArguments) -> int:
    return int(
        args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
    )


def _dataset_size(dataloader: Any) -> int | None:
    try:
        return len(dataloader.dataset)
    except (AttributeError, TypeError):
        return None


def _position(
    args: TrainingArguments, state: TrainerState, dataloader: Any
) -> tuple[int | None, int | None]:
    """Epoch and samples consumed in it, as the Trainer's own resume computes them."""
    try:
        batches = len(dataloader)
    except TypeError:
        return None, None
    accumulate = args.gradient_accumulation_steps
    per_epoch = max(batches // accumulate + int(batches % accumulate > 0), 1)
    epoch, done = divmod(state.global_step, per_epoch)
    consumed = done * accumulate * args.per_device_train_batch_size * args.world_size
    return epoch, consumed


def _base_sampler(dataloader: Any) -> Any:
    batch_sampler = getattr(dataloader, "batch_sampler", None)
    inner = getattr(batch_sampler, "batch_sampler", None)  # accelerate's BatchSamplerShard
    return getattr(inner if inner is not None else batch_sampler, "sampler", None)


def _sampler_config(args: TrainingArguments, dataloader: Any) -> dict[str, Any] | None:
    """The designed data order, when the loader's sampler is one Runwatch can replay."""
    sampler = _base_sampler(dataloader)
    kind = type(sampler).__name__
    if kind == "SeedableRandomSampler" and type(getattr(sampler, "initial_seed", None)) is int:
        # accelerate seeds each epoch with seed + epoch: DistributedSampler's order.
        seed = sampler.initial_seed
        return {"kind": "torch_distributed", "seed": seed, "drop_last": args.dataloader_drop_last}
    if kind == "SequentialSampler":
        return {"kind": "sequential", "drop_last": args.dataloader_drop_last}
    return None


def _config(args: TrainingArguments, dataloader: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "trainer": "transformers",
        "training_args": args.to_dict(),
        "global_batch_size": _global_batch_size(args),
    }
    size = _dataset_size(dataloader)
    if size is not None:
        config["dataset_size"] = size
    sampler = _sampler_config(args, dataloader)
    if sampler is not None:
        config["sampler"] = sampler
    return config

"""Lightning callback that writes a Runwatch run directory.

    trainer = lightning.Trainer(..., callbacks=[RunwatchCallback("runs/exp1")])

Importing this module imports lightning.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from app.tracking.logger import RunLogger
from app.tracking.torch_helpers import StepRecorder

IdSource = str | int | Callable[[Any], Any] | None


def checkpoint_name(path: str | os.PathLike[str] | None, step: int) -> str:
    """Manifest folder name: the checkpoint file's stem, or ``step_<step>`` without a file."""
    stem = Path(path).stem if path else ""
    return stem if stem and stem not in (".", "..") else f"step_{step:06d}"


def checkpoint_components(checkpoint: Mapping[str, Any]) -> list[str]:
    """The training state a Lightning checkpoint dict holds, as Runwatch component names."""
    parts = []
    if checkpoint.get("state_dict") is not None:
        parts.append("model")
    if checkpoint.get("optimizer_states"):
        parts.append("optimizer")
    if checkpoint.get("lr_schedulers"):
        parts.append("scheduler")
    if any(
        key == "native_amp_scaling_state" or (key.endswith("Precision") and value)
        for key, value in checkpoint.items()
    ):
        parts.append("scaler")
    fit_loop = checkpoint.get("loops", {}).get("fit_loop", {})
    if fit_loop.get("state_dict", {}).get("combined_loader"):
        parts.append("dataloader")  # only stateful loaders resume their position
    return parts


class RunwatchCallback(Callback):
    """Writes process start/exit, per-step metrics (loss, lr, grad_norm, epoch), validation
    metrics, checkpoint manifests and each step's sample ids.

    ``run`` is a :class:`RunLogger` or a run directory (a logger is then made on global rank 0
    with ``logger_options``, e.g. ``server=`` to stream, whose token defaults to
    ``RUNWATCH_TOKEN``; it is closed when training ends). ``sample_ids`` says where a batch
    carries its dataset indices: a mapping key (default ``"sample_id"``, as
    ``SampleIdDataset(ds, key="sample_id")`` adds), a tuple position, or a function of the batch.
    """

    def __init__(
        self,
        run: RunLogger | str | os.PathLike[str],
        *,
        sample_ids: IdSource = "sample_id",
        grad_norm: bool = True,
        **logger_options: Any,
    ) -> None:
        self._given = run if isinstance(run, RunLogger) else None
        self._run_dir = None if isinstance(run, RunLogger) else run
        self._options = logger_options
        self.logger: RunLogger | None = self._given
        self.sample_ids = sample_ids
        self.track_grad_norm = grad_norm
        self._recorder: StepRecorder | None = None
        self._loaded: tuple[int, list[str]] | None = None
        self._pending: dict[str, Any] | None = None
        self._last_step = -1
        self._loss = 0.0
        self._lr: float | None = None
        self._grad_norm: float | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        if trainer.is_global_zero and self.logger is None and self._run_dir is not None:
            self.logger = RunLogger(self._run_dir, **self._options)
        self._recorder = StepRecorder(self.logger if trainer.is_global_zero else None)

    def on_load_checkpoint(
        self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        self._loaded = (int(checkpoint.get("global_step", 0)), checkpoint_components(checkpoint))

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._last_step = trainer.global_step
        log = self._writer(trainer)
        if log is None:
            return
        log.set_config(_config(trainer))
        resumed_from, restored = None, None
        if self._loaded is not None and trainer.ckpt_path is not None:
            step, restored = self._loaded
            resumed_from = checkpoint_name(trainer.ckpt_path, step)
            if not (log.run_dir / "checkpoints" / resumed_from).is_dir():
                resumed_from = checkpoint_name(None, step)  # saved outside ModelCheckpoint
        log.start(trainer.global_step, resumed_from=resumed_from, restored=restored)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._finish_save(trainer)
        self._end(trainer, "finished")

    def on_exception(
        self, trainer: Trainer, pl_module: LightningModule, exception: BaseException
    ) -> None:
        self._finish_save(trainer)
        self._end(trainer, f"error: {type(exception).__name__}")

    # -- steps --------------------------------------------------------------------------------

    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._finish_save(trainer)

    def on_before_optimizer_step(
        self, trainer: Trainer, pl_module: LightningModule, optimizer: Any
    ) -> None:
        self._lr = float(optimizer.param_groups[0]["lr"])
        if self.track_grad_norm:
            grads = [p.grad.detach() for p in pl_module.parameters() if p.grad is not None]
            if grads:
                norms = torch.stack([torch.linalg.vector_norm(g, 2.0).float() for g in grads])
                self._grad_norm = float(torch.linalg.vector_norm(norms, 2.0))

    def on_train_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        self._finish_save(trainer)
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if isinstance(loss, torch.Tensor) and loss.numel() == 1:
            self._loss += float(loss.detach())  # already divided by the accumulation count
        ids = _batch_ids(batch, self.sample_ids)
        if ids is not None and self._recorder is not None:
            self._recorder.add(ids)
        step = trainer.global_step
        if step == self._last_step:
            return  # a micro-batch: the optimizer has not stepped yet
        self._last_step = step
        if ids is not None and self._recorder is not None:
            self._recorder.record(step)
        log = self._writer(trainer)
        if log is not None:
            values: dict[str, Any] = {"loss": self._loss}
            if self._lr is not None:
                values["lr"] = self._lr
            if self._grad_norm is not None:
                values["grad_norm"] = self._grad_norm
            log.metrics(step, **values, epoch=trainer.current_epoch)
        self._loss, self._lr, self._grad_norm = 0.0, None, None

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        log = self._writer(trainer)
        if log is None or trainer.sanity_checking:
            return
        values = {
            key: float(value)
            for key, value in trainer.callback_metrics.items()
            if key.startswith("val") and isinstance(value, torch.Tensor) and value.numel() == 1
        }
        if values:
            log.eval(trainer.global_step, **values)

    # -- checkpoints --------------------------------------------------------------------------

    def on_save_checkpoint(
        self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        log = self._writer(trainer)
        if log is None:
            return
        self._finish_save(trainer)
        step = trainer.global_step
        started = time.time()
        log.event("checkpoint_save_start", step, time=started)
        # The file is written after this hook: the manifest follows at the next hook.
        self._pending = {
            "step": step,
            "time_start": started,
            "components": checkpoint_components(checkpoint),
            "epoch": checkpoint.get("epoch"),
        }

    def _finish_save(self, trainer: Trainer) -> None:
        pending, self._pending = self._pending, None
        log = self._writer(trainer)
        if pending is None or log is None:
            return
        step = pending["step"]
        path = _saved_file(trainer, step)
        ended = time.time()
        log.event("checkpoint_save_end", step, time=ended)
        file = os.path.basename(path) if path else None
        batch = _global_batch_size(trainer)
        log.checkpoint(
            checkpoint_name(path, step),
            step,
            components={name: {"file": file, "bytes": None} for name in pending["components"]},
            consumed_samples=None if batch is None else step * batch,
            epoch=pending["epoch"],
            dataset_size=_dataset_size(trainer),
            global_batch_size=batch,
            time_start=pending["time_start"],
            time_end=ended,
        )

    # -- helpers ------------------------------------------------------------------------------

    def _writer(self, trainer: Trainer) -> RunLogger | None:
        return self.logger if trainer.is_global_zero else None

    def _end(self, trainer: Trainer, reason: str) -> None:
        log = self._writer(trainer)
        if log is None:
            return
        log.exit(trainer.global_step, reason=reason)
        if self._given is None:
            log.close()
            self.logger = None


def _batch_ids(batch: Any, source: IdSource) -> Any:
    if source is None:
        return None
    if callable(source):
        return source(batch)
    if isinstance(source, str):
        return batch.get(source) if isinstance(batch, Mapping) else None
    if isinstance(batch, (list, tuple)) and -len(batch) <= source < len(batch):
        return batch[source]
    return None


def _saved_file(trainer: Trainer, step: int) -> str | None:
    """The file a ModelCheckpoint callback wrote at ``step``, when one did."""
    for callback in trainer.checkpoint_callbacks:
        path = getattr(callback, "_last_checkpoint_saved", None)
        if getattr(callback, "_last_global_step_saved", None) == step and path:
            return str(path)
    return None


def _train_loader(trainer: Trainer) -> Any:
    loader = trainer.train_dataloader
    return loader if isinstance(loader, torch.utils.data.DataLoader) else None


def _global_batch_size(trainer: Trainer) -> int | None:
    loader = _train_loader(trainer)
    size = getattr(loader, "batch_size", None)
    if size is None:
        return None
    return int(size * trainer.accumulate_grad_batches * trainer.world_size)


def _dataset_size(trainer: Trainer) -> int | None:
    try:
        return len(_train_loader(trainer).dataset)
    except (AttributeError, TypeError):
        return None


def _config(trainer: Trainer) -> dict[str, Any]:
    config: dict[str, Any] = {
        "trainer": "lightning",
        "max_steps": trainer.max_steps,
        "max_epochs": trainer.max_epochs,
        "accumulate_grad_batches": trainer.accumulate_grad_batches,
        "precision": str(trainer.precision),
        "world_size": trainer.world_size,
    }
    batch = _global_batch_size(trainer)
    if batch is not None:
        config["global_batch_size"] = batch
    size = _dataset_size(trainer)
    if size is not None:
        config["dataset_size"] = size
    return config

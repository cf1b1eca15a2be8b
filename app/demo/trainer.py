"""The training loop, checkpointing, and crash/resume across simulated processes.

A :class:`TrainingProcess` is one process lifetime: it builds every in-memory object (model,
optimizer, schedule, RNG, sampler) from scratch or from a checkpoint, trains, and is discarded at
exit. Only the :class:`CheckpointStore` and the files in the run directory outlive it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from app.demo.checkpoint import (
    COMPONENT_FILES,
    WRITTEN_COMPONENTS,
    CheckpointStore,
    SavedCheckpoint,
    checkpoint_name,
    pack_arrays,
    pack_json,
    unpack_arrays,
    unpack_json,
)
from app.demo.clock import SimClock
from app.demo.dataset import Dataset, make_dataset
from app.demo.model import MLP
from app.demo.optim import AdamW, WarmupCosine, clip_grad_norm
from app.demo.plan import FaultPlan, Interruption, ResumeBugs, SlowSave, TrainConfig
from app.demo.sampler import EpochSampler
from app.demo.writer import ProcessLog, RunWriter


@dataclass(frozen=True)
class ResumeReport:
    """What one resume actually restored, for labelling the run."""

    at: int
    checkpoint: str
    saved: list[str]  # components present in the checkpoint
    restored: list[str]
    loader_saved: dict[str, Any] | None  # the checkpoint's sampler state
    loader_now: dict[str, Any]  # the sampler state the resumed process starts with
    lr_saved: float  # the LR the checkpointed schedule would give next
    lr_now: float


@dataclass(frozen=True)
class RunResult:
    run_dir: Path
    dataset_size: int
    steps_per_epoch: int
    total_steps: int
    resumes: list[ResumeReport]


@dataclass
class _InflightSave:
    checkpoint: SavedCheckpoint
    time_start: float
    ends_at: float
    batches_left: int


def train_run(
    run_dir: Path, config: TrainConfig, plan: FaultPlan, *, start_time: float
) -> RunResult:
    """Train to the end, stopping and resuming as ``plan`` says; write the run directory."""
    data = make_dataset(config.seed)
    steps = total_steps(config, data.size)
    if plan.last_fault_step() >= steps:
        raise ValueError(
            f"the faults need more than {plan.last_fault_step()} steps;"
            f" {config.epochs} epochs give {steps}"
        )
    writer = RunWriter(run_dir)
    writer.reset()
    store = CheckpointStore()
    clock = SimClock(start_time)
    reports: list[ResumeReport] = []
    resume: Interruption | None = None
    for stop in [*plan.interruptions, None]:
        with writer.open_process() as log:
            process = TrainingProcess(config, plan, data, store, clock, writer, log, resume)
            if process.report is not None:
                reports.append(process.report)
            process.run(stop)
        del process  # a crash drops every in-memory object
        if stop is not None:
            clock.sleep(config.downtime_s)
            resume = stop
    return RunResult(
        run_dir=run_dir,
        dataset_size=data.size,
        steps_per_epoch=data.size // config.global_batch_size,
        total_steps=steps,
        resumes=reports,
    )


def total_steps(config: TrainConfig, dataset_size: int) -> int:
    return config.epochs * (dataset_size // config.global_batch_size)


class TrainingProcess:
    def __init__(
        self,
        config: TrainConfig,
        plan: FaultPlan,
        data: Dataset,
        store: CheckpointStore,
        clock: SimClock,
        writer: RunWriter,
        log: ProcessLog,
        resume: Interruption | None,
    ) -> None:
        self.config = config
        self.plan = plan
        self.data = data
        self.store = store
        self.clock = clock
        self.writer = writer
        self.log = log
        self.total_steps = total_steps(config, data.size)
        self.model = MLP(data.num_features, config.hidden, data.num_classes, seed=config.seed)
        self.optimizer = AdamW(self.model.size, weight_decay=config.weight_decay)
        self.schedule = WarmupCosine(
            config.peak_lr, config.warmup_steps, self.total_steps, config.min_lr_ratio
        )
        self.rng = np.random.default_rng([config.seed, 0x5EED])
        self.sampler = EpochSampler(
            data.size, config.global_batch_size, seed=config.seed, shuffle=plan.shuffle
        )
        self.step = 0
        self.calls_set_epoch = True
        self.slow_saves: dict[int, SlowSave] = {save.step: save for save in plan.slow_saves}
        self.corrupt_steps = frozenset(plan.corrupt_label_steps)
        self.inflight: _InflightSave | None = None
        self.resumed_from: str | None = None
        self.report: ResumeReport | None = None
        if resume is not None:
            self.report = self._restore(resume)

    # -- resume -----------------------------------------------------------------------------

    def _restore(self, resume: Interruption) -> ResumeReport:
        """Rebuild state from a checkpoint, going wrong where ``resume.bugs`` says."""
        saved = self.store.get(resume.resume_from)
        blobs, bugs = saved.blobs, resume.bugs
        restored = ["model"]
        self.model.load_state_dict(unpack_arrays(blobs["model"]))
        if "optimizer" in blobs and not bugs.skip_optimizer:
            self.optimizer.load_state_dict(unpack_arrays(blobs["optimizer"]))
            restored.append("optimizer")
        saved_schedule = WarmupCosine(0.0, 1, 1)
        saved_schedule.load_state_dict(unpack_json(blobs["scheduler"]))
        if not bugs.skip_scheduler:
            self.schedule.load_state_dict(unpack_json(blobs["scheduler"]))
            restored.append("scheduler")
        if "rng" in blobs:
            self.rng.bit_generator.state = unpack_json(blobs["rng"])
            restored.append("rng")
        self.step = saved.step
        loader_saved = unpack_json(blobs["dataloader"]) if "dataloader" in blobs else None
        self._restore_loader(loader_saved, bugs, restored)
        self.calls_set_epoch = not bugs.forget_set_epoch
        self.resumed_from = f"checkpoints/{saved.name}"
        return ResumeReport(
            at=saved.step,
            checkpoint=saved.name,
            saved=list(blobs),
            restored=restored,
            loader_saved=loader_saved,
            loader_now=self.sampler.state_dict(),
            lr_saved=saved_schedule.lr(),
            lr_now=self.schedule.lr(),
        )

    def _restore_loader(
        self, state: dict[str, Any] | None, bugs: ResumeBugs, restored: list[str]
    ) -> None:
        if state is not None and bugs.fresh_loader_seed is None:
            self.sampler.load_state_dict(state, offset_every_epoch=bugs.offset_every_epoch)
            restored.append("dataloader")
            return
        # No loader state used: like a trainer that derives the epoch from the global step and
        # builds a fresh loader, which starts reading that epoch from its beginning.
        seed = self.config.seed if bugs.fresh_loader_seed is None else bugs.fresh_loader_seed
        epoch = self.step // self.sampler.steps_per_epoch
        self.sampler = EpochSampler(
            self.data.size,
            self.config.global_batch_size,
            seed=seed,
            shuffle=self.plan.shuffle,
            epoch=epoch,
        )

    # -- training ---------------------------------------------------------------------------

    def run(self, stop: Interruption | None) -> None:
        start: dict[str, Any] = {"resumed_from": self.resumed_from}
        if self.report is not None:
            start["restored"] = self.report.restored
        self.log.event("process_start", self.step, self.clock.now(), **start)
        pending_loss = 0.0
        while self.step < self.total_steps:
            ids, epoch_done = self.sampler.next_batch()
            if epoch_done and self.calls_set_epoch:
                self.sampler.set_epoch(self.sampler.epoch)
            # Read after the sampler advanced: an epoch's last step reports the next epoch.
            epoch = self.sampler.epoch
            x, y = self._batch(ids, self.step + 1)
            # Like loggers that add up every micro-batch's loss until the next optimizer step,
            # so a step that absorbed stalled batches logs their summed loss.
            pending_loss += self.model.accumulate(x, y)
            self.step += 1
            lr = self.schedule.lr()
            self.schedule.step()
            if self.inflight is not None:
                if self.inflight.batches_left > 0:  # the optimizer step waits for the save
                    self.inflight.batches_left -= 1
                    continue
                self._finish_save(self.inflight)
            grad_norm = clip_grad_norm(self.model.grad, self.config.max_grad_norm)
            self.optimizer.step(self.model.params, self.model.grad, lr)
            self.model.zero_grad()
            now = self.clock.now()
            self.log.metric(
                step=self.step, loss=pending_loss, lr=lr, grad_norm=grad_norm, epoch=epoch, time=now
            )
            self.log.samples(self.step, ids.tolist())
            pending_loss = 0.0
            if self.step % self.config.eval_every == 0:
                self._evaluate()
            if self.step % self.config.checkpoint_every == 0:
                self._save()
            if stop is not None and self.step == stop.at_step:
                self.log.event("process_exit", self.step, self.clock.now(), reason=stop.reason)
                return
        if stop is not None:
            raise RuntimeError(f"the planned stop at step {stop.at_step} is not a logged step")
        self.log.event("process_exit", self.step, self.clock.now(), reason="finished")

    def _batch(self, ids: np.ndarray, step: int) -> tuple[np.ndarray, np.ndarray]:
        x = self.data.x[ids]
        x = x + self.config.input_noise * self.rng.standard_normal(x.shape)
        y = self.data.y[ids]
        if step in self.corrupt_steps:  # a garbled read: every label shifted to a wrong class
            y = (y + 1 + ids % (self.data.num_classes - 1)) % self.data.num_classes
        return x, y

    def _evaluate(self) -> None:
        predicted = self.model.predict(self.data.eval_x)
        truth = self.data.eval_y
        correct = np.bincount(truth[predicted == truth], minlength=self.data.num_classes)
        counts = np.bincount(truth, minlength=self.data.num_classes)
        accuracy = (correct / np.maximum(counts, 1)).tolist()
        self.log.evaluation(self.step, accuracy, self.clock.now())

    # -- checkpointing ----------------------------------------------------------------------

    def _save(self) -> None:
        time_start = self.clock.now()
        self.log.event("checkpoint_save_start", self.step, time_start)
        blobs: dict[str, bytes] = {"model": pack_arrays(self.model.state_dict())}
        if self.plan.save_optimizer:
            blobs["optimizer"] = pack_arrays(self.optimizer.state_dict())
        blobs["scheduler"] = pack_json(self.schedule.state_dict())
        blobs["rng"] = pack_json(self.rng.bit_generator.state)
        loader = self.sampler.state_dict()
        blobs["dataloader"] = pack_json(loader)
        manifest: dict[str, Any] = {
            "step": self.step,
            "time_start": time_start,
            "time_end": None,
            "consumed_samples": self.step * self.config.global_batch_size,
            "epoch": loader["epoch"],
            "consumed_in_epoch": loader["consumed_in_epoch"],
            "seed": loader["seed"],
            "shuffle": loader["shuffle"],
            "dataset_size": self.data.size,
            "global_batch_size": self.config.global_batch_size,
            "components": {
                name: {"file": COMPONENT_FILES[name], "bytes": len(blob)}
                for name, blob in blobs.items()
            },
        }
        checkpoint = SavedCheckpoint(checkpoint_name(self.step), self.step, blobs, manifest)
        slow = self.slow_saves.get(self.step)
        if slow is None:
            self._commit(checkpoint, self.clock.now())
        else:  # state is captured now; the write finishes while training goes on
            self.inflight = _InflightSave(
                checkpoint, time_start, time_start + slow.seconds, slow.stalled_batches
            )

    def _finish_save(self, inflight: _InflightSave) -> None:
        self.clock.wait_until(inflight.ends_at)
        self._commit(inflight.checkpoint, self.clock.now())
        self.inflight = None

    def _commit(self, checkpoint: SavedCheckpoint, time_end: float) -> None:
        checkpoint.manifest["time_end"] = time_end
        self.store.put(checkpoint)
        files = {
            COMPONENT_FILES[name]: checkpoint.blobs[name]
            for name in WRITTEN_COMPONENTS
            if name in checkpoint.blobs
        }
        self.writer.write_checkpoint(checkpoint.name, checkpoint.manifest, files)
        self.log.event("checkpoint_save_end", checkpoint.step, time_end)

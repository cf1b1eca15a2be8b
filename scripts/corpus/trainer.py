"""The torch training loop, checkpointing, and crash/resume across simulated processes.

A :class:`TrainingProcess` is one process lifetime: it builds the model, AdamW, the LR scheduler,
the RNG and the sampler/DataLoader from scratch, restores them from a checkpoint's bytes if it
resumes (correctly, or with the plan's bug), trains, and is dropped at exit. Only the
:class:`RunContext` (data, checkpoint bytes, the clock, the written files) outlives it.
"""

from __future__ import annotations

import io
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.optim import AdamW
from torch.optim.lr_scheduler import LambdaLR, LinearLR, LRScheduler, OneCycleLR, StepLR
from torch.utils.data import DataLoader

from scripts.corpus.faults import FaultPlan, Interruption, ResumeBugs, SlowSave
from scripts.corpus.samplers import (
    Batch,
    IndexedTensors,
    ResumableBatchSampler,
    SamplerSpec,
    keep_batch,
)
from scripts.corpus.tasks import Task
from scripts.corpus.writer import ProcessLog, RunWriter

SCHEDULERS = ("warmup_cosine", "warmup_constant", "onecycle", "step", "linear")
COMPONENT_FILES = {
    "model": "model.pt",
    "optimizer": "optimizer.pt",
    "scheduler": "scheduler.pt",
    "rng": "rng_state.pth",
    "dataloader": "sampler.json",
}


@dataclass(frozen=True)
class RunConfig:
    task: str
    sampler: SamplerSpec
    total_steps: int
    grad_accum: int = 1
    hidden: int = 48
    lr: float = 3e-3
    weight_decay: float = 0.01
    scheduler: str = "warmup_cosine"
    warmup_steps: int = 30
    max_grad_norm: float | None = 2.0
    augment: float = 0.1
    model_seed: int = 0
    checkpoint_every: int = 100
    log_every: int = 1
    eval_every: int = 0
    epoch_after_advance: bool = True  # log the epoch read after the sampler advanced
    save_seconds: float = 1.0
    start_time: float = 1.7e9


class SimClock:
    """Unix seconds: start + real compute time + injected delays; never decreases."""

    def __init__(self, start: float) -> None:
        self.start, self.origin, self.injected = start, time.perf_counter(), 0.0

    def now(self) -> float:
        return round(self.start + time.perf_counter() - self.origin + self.injected, 4)

    def sleep(self, seconds: float) -> None:
        self.injected += max(seconds, 0.0)


@dataclass
class Saved:
    name: str
    step: int
    blobs: dict[str, bytes]
    manifest: dict[str, Any]


@dataclass(frozen=True)
class ResumeReport:
    """What one resume actually restored, for labelling the run."""

    at: int
    checkpoint: str
    crash_step: int
    skipped: list[str]  # newer checkpoints that failed to load
    saved: list[str]
    restored: list[str]
    loader_saved: dict[str, Any]
    loader_now: dict[str, Any]
    lr_saved: float
    lr_now: float
    bugs: ResumeBugs


@dataclass
class RunContext:
    """Everything that outlives a process: data on disk, checkpoint bytes, clock, output."""

    config: RunConfig
    task: Task
    plan: FaultPlan
    writer: RunWriter
    clock: SimClock
    dataset: IndexedTensors
    store: dict[int, Saved] = field(default_factory=dict)
    trace: dict[int, list[int]] = field(default_factory=dict)  # step -> ids (latest process)
    losses: dict[int, float] = field(default_factory=dict)
    stalls: dict[int, list[int]] = field(default_factory=dict)  # save -> [first, last, spike]
    resumes: list[ResumeReport] = field(default_factory=list)


def make_scheduler(config: RunConfig, optimizer: AdamW) -> LRScheduler:
    total, warm = config.total_steps, max(config.warmup_steps, 1)
    if config.scheduler == "warmup_cosine":

        def cosine(s: int) -> float:
            decay = 0.1 + 0.45 * (1.0 + math.cos(math.pi * min(s, total) / total))
            return min(1.0, (s + 1) / warm) * decay

        return LambdaLR(optimizer, cosine)
    if config.scheduler == "warmup_constant":
        return LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warm))
    if config.scheduler == "onecycle":
        pct = min(max(warm / total, 0.05), 0.4)
        return OneCycleLR(optimizer, config.lr, total_steps=total + 8, pct_start=pct)
    if config.scheduler == "step":
        return StepLR(optimizer, step_size=max(total // 4, 1), gamma=0.5)
    if config.scheduler == "linear":
        return LinearLR(optimizer, start_factor=1.0, end_factor=0.05, total_iters=total)
    raise ValueError(f"unknown scheduler {config.scheduler!r}")


def clip_grad_norm(model: torch.nn.Module, max_norm: float | None) -> float:
    """``torch.nn.utils.clip_grad_norm_`` (total 2-norm, scale down if above), without its
    per-call overhead; returns the norm before clipping."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    if max_norm is not None:
        torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))
    return float(total)


def pack(state: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def unpack(blob: bytes) -> Any:
    return torch.load(io.BytesIO(blob), weights_only=True)


def checkpoint_name(step: int) -> str:
    return f"step_{step:06d}"


def train_run(ctx: RunContext) -> None:
    """Train to the end, stopping and resuming as the plan says; fills ``ctx``."""
    resume: Interruption | None = None
    for stop in [*ctx.plan.interruptions, None]:
        with ctx.writer.open_process() as log:
            process = TrainingProcess(ctx, log, resume)
            process.run(stop)
        del process  # a crash drops every in-memory object
        if stop is not None:
            ctx.clock.sleep(stop.downtime_s)
            resume = stop


class TrainingProcess:
    def __init__(self, ctx: RunContext, log: ProcessLog, resume: Interruption | None) -> None:
        self.ctx, self.log, cfg = ctx, log, ctx.config
        torch.manual_seed(cfg.model_seed)  # weight init
        self.model = ctx.task.build_model(cfg.hidden)
        self.optimizer = AdamW(
            self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, fused=True
        )
        self.scheduler = make_scheduler(cfg, self.optimizer)
        self.generator = torch.Generator().manual_seed(cfg.model_seed + 7919)
        self.sampler = ResumableBatchSampler(cfg.sampler)
        self.calls_set_epoch = True
        self.step = 0
        self.consumed = 0
        self.inflight: tuple[Saved, float, SlowSave] | None = None
        self.stalled = 0
        self.resumed_from: str | None = None
        self.report: ResumeReport | None = None
        if resume is not None:
            self.report = self._restore(resume)
            ctx.resumes.append(self.report)
        self.loader = DataLoader(ctx.dataset, batch_sampler=self.sampler, collate_fn=keep_batch)

    # -- resume -----------------------------------------------------------------------------

    def _restore(self, stop: Interruption) -> ResumeReport:
        """Load the newest checkpoint that loads, going wrong where ``stop.bugs`` says."""
        bugs, skipped = stop.bugs, []
        for step in sorted((s for s in self.ctx.store if s <= stop.at_step), reverse=True):
            saved = self.ctx.store[step]
            try:
                states = {k: unpack(v) for k, v in saved.blobs.items() if k != "dataloader"}
            except (RuntimeError, EOFError, OSError, ValueError):
                skipped.append(saved.name)
                continue
            break
        else:
            raise RuntimeError("no checkpoint loads")
        restored = ["model"]
        self.model.load_state_dict(states["model"])
        if "optimizer" in states and not bugs.skip_optimizer:
            self.optimizer.load_state_dict(states["optimizer"])
            restored.append("optimizer")
        if not bugs.skip_scheduler:
            self.scheduler.load_state_dict(states["scheduler"])
            restored.append("scheduler")
        # The trainer syncs the optimizer's LR with the schedule it now has.
        for group, lr in zip(
            self.optimizer.param_groups, self.scheduler.get_last_lr(), strict=True
        ):
            group["lr"] = lr
        self.generator.set_state(states["rng"]["torch"])
        restored.append("rng")
        self.step = int(saved.manifest["step"])
        self.consumed = int(saved.manifest["consumed_samples"])
        loader_saved = json.loads(saved.blobs["dataloader"])
        if self._restore_loader(loader_saved, bugs):
            restored.append("dataloader")
        self.resumed_from = f"checkpoints/{saved.name}"
        return ResumeReport(
            at=self.step,
            checkpoint=saved.name,
            crash_step=stop.at_step,
            skipped=skipped,
            saved=list(saved.manifest["components"]),
            restored=restored,
            loader_saved=loader_saved,
            loader_now=self.sampler.state_dict(),
            lr_saved=float(states["scheduler"]["_last_lr"][0]),
            lr_now=float(self.optimizer.param_groups[0]["lr"]),
            bugs=bugs,
        )

    def _restore_loader(self, state: dict[str, Any], bugs: ResumeBugs) -> bool:
        """Rebuild the sampler; returns whether the saved loader state was used."""
        spec = self.ctx.config.sampler
        if bugs.fresh_seed is not None:  # a fresh loader at the epoch the global step implies
            if spec.cyclic:
                epoch = self.consumed // spec.usable
            else:
                epoch = self.step // int(spec.steps_per_epoch)
            self.sampler = ResumableBatchSampler(spec, seed=bugs.fresh_seed, epoch=epoch)
            return False
        state = dict(state)
        offset = int(state["consumed_in_epoch"])
        if bugs.position_lost:  # a non-stateful loader: the epoch restarts, ends by batch count
            state["consumed_in_epoch"] = 0
        if bugs.skip_factor is not None:
            state["consumed_in_epoch"] = int(offset * bugs.skip_factor)
        if bugs.epoch_variant is not None:
            shift = -1 if bugs.epoch_variant == "behind" else 1
            state["epoch"] = max(int(state["epoch"]) + shift, 0)
            if bugs.epoch_variant == "skip_rest":
                state["consumed_in_epoch"] = 0
        self.sampler.load_state_dict(state, sets_epoch=bugs.forget_set_epoch != "epoch0")
        if bugs.position_lost and offset:
            self.sampler.end_override = spec.usable - offset
        if bugs.offset_every_epoch is not None:
            self.sampler.epoch_start = offset
            self.sampler.replay_tail = bugs.offset_every_epoch == "tail"
        self.calls_set_epoch = bugs.forget_set_epoch is None
        return not bugs.position_lost

    # -- training ---------------------------------------------------------------------------

    def run(self, stop: Interruption | None) -> None:
        ctx, cfg, log = self.ctx, self.ctx.config, self.log
        start: dict[str, Any] = {"resumed_from": self.resumed_from}
        if self.report is not None:
            start["restored"] = self.report.restored
        log.event("process_start", self.step, ctx.clock.now(), **start)
        if self.calls_set_epoch:
            self.sampler.set_epoch(self.sampler.epoch)
        seen_epoch = self.sampler.epoch
        batches = iter(self.loader)
        pending_loss, pending_ids, window = 0.0, [], []
        while self.step < cfg.total_steps:
            batch_epoch = self.sampler.epoch
            batch: Batch = next(batches)
            if self.sampler.epoch != seen_epoch:
                seen_epoch = self.sampler.epoch
                if self.calls_set_epoch:
                    self.sampler.set_epoch(seen_epoch)
            epoch = self.sampler.epoch if cfg.epoch_after_advance else batch_epoch
            self.step += 1
            self.consumed += len(batch.ids)
            ctx.trace[self.step] = batch.ids
            pending_ids += batch.ids
            pending_loss += self._accumulate(batch)
            lr = float(self.optimizer.param_groups[0]["lr"])
            if self.inflight is not None and self._stalled():
                self.scheduler.step()  # the schedule follows the step counter
                continue
            grad_norm = clip_grad_norm(self.model, cfg.max_grad_norm)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.scheduler.step()
            ctx.losses[self.step] = pending_loss
            window.append(pending_loss)
            if self.step % cfg.log_every == 0:
                record = {"step": self.step, "loss": round(sum(window) / len(window), 6)}
                record |= {"lr": lr, "grad_norm": round(grad_norm, 5), "epoch": epoch}
                log.metric(**record, time=ctx.clock.now())
                window = []
            log.samples(self.step, pending_ids)
            pending_loss, pending_ids = 0.0, []
            if cfg.eval_every and self.step % cfg.eval_every == 0:
                log.evaluation(self.step, ctx.task.evaluate(self.model), ctx.clock.now())
            if self.step % cfg.checkpoint_every == 0:
                self._save()
            if stop is not None and self.step == stop.at_step:
                log.event("process_exit", self.step, ctx.clock.now(), reason=stop.reason)
                return
        log.event("process_exit", self.step, ctx.clock.now(), reason="finished")

    def _accumulate(self, batch: Batch) -> float:
        """Forward/backward over the micro-batches; gradients add up until the optimizer step."""
        ctx = self.ctx
        x = ctx.task.augment(batch.x, self.generator, ctx.config.augment)
        y = batch.y
        if self.step in ctx.plan.bad_steps:
            x, y = ctx.task.corrupt(x, y, self.generator, ctx.plan.bad_mode)
        total = 0.0
        for xs, ys in zip(
            x.chunk(ctx.config.grad_accum), y.chunk(ctx.config.grad_accum), strict=True
        ):
            loss = ctx.task.loss(self.model(xs), ys) * (ys.shape[0] / y.shape[0])
            loss.backward()
            total += float(loss.detach())
        return total

    def _stalled(self) -> bool:
        """During a slow save the optimizer step waits; batches keep coming. False when done."""
        assert self.inflight is not None
        saved, ends_at, slow = self.inflight
        if self.stalled < slow.stalled_batches:
            self.stalled += 1
            return True
        self.ctx.clock.sleep(ends_at - self.ctx.clock.now())
        self._commit(saved)
        self.ctx.stalls[saved.step] = [saved.step + 1, self.step - 1, self.step]
        self.inflight, self.stalled = None, 0
        return False

    # -- checkpointing ----------------------------------------------------------------------

    def _save(self) -> None:
        ctx, cfg = self.ctx, self.ctx.config
        time_start = ctx.clock.now()
        self.log.event("checkpoint_save_start", self.step, time_start)
        blobs = {"model": pack(self.model.state_dict())}
        if ctx.plan.save_optimizer:
            blobs["optimizer"] = pack(self.optimizer.state_dict())
        blobs["scheduler"] = pack(self.scheduler.state_dict())
        blobs["rng"] = pack({"torch": self.generator.get_state()})
        loader = self.sampler.state_dict()
        blobs["dataloader"] = json.dumps(loader).encode()
        torn = self.step in ctx.plan.corrupt_checkpoints and self.step not in ctx.store
        if torn:  # the first write of this save is torn: the file is cut short
            blobs["model"] = blobs["model"][: len(blobs["model"]) // 3]
        manifest: dict[str, Any] = {
            "step": self.step,
            "time_start": time_start,
            "time_end": None,
            "consumed_samples": self.consumed,
            "epoch": loader["epoch"],
            "consumed_in_epoch": loader["consumed_in_epoch"],
            "seed": loader["seed"],
            "shuffle": loader["shuffle"],
            "dataset_size": cfg.sampler.dataset_size,
            "global_batch_size": cfg.sampler.global_batch_size,
            "components": {
                name: {"file": COMPONENT_FILES[name], "bytes": len(blob)}
                for name, blob in blobs.items()
            },
        }
        saved = Saved(checkpoint_name(self.step), self.step, blobs, manifest)
        slow = next((s for s in ctx.plan.slow_saves if s.step == self.step), None)
        if slow is None:
            ctx.clock.sleep(cfg.save_seconds * (0.7 + 0.6 * (self.step % 7) / 6))
            self._commit(saved)
        else:  # state captured now; the write finishes while the loop reads on
            self.inflight = (saved, time_start + slow.seconds, slow)

    def _commit(self, saved: Saved) -> None:
        time_end = self.ctx.clock.now()
        saved.manifest["time_end"] = time_end
        self.ctx.store[saved.step] = saved
        self.ctx.writer.write_checkpoint(saved.name, saved.manifest, saved.blobs["dataloader"])
        self.log.event("checkpoint_save_end", saved.step, time_end)

"""What one demo run does: the training configuration and the faults to inject.

Faults are flags and step lists that the trainer's real code paths consult (the resume code, the
save path, the data loader); nothing edits the logs after the fact.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TrainConfig:
    seed: int = 1234
    epochs: int = 15
    global_batch_size: int = 32
    hidden: int = 64
    peak_lr: float = 3e-3
    warmup_steps: int = 50
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 2.0
    input_noise: float = 0.1  # augmentation drawn from the checkpointed training RNG
    eval_every: int = 20
    checkpoint_every: int = 100
    downtime_s: float = 600.0  # between a process exit and the resumed process


@dataclass(frozen=True)
class ResumeBugs:
    """Mistakes in the resume code path; each flag is read where the real bug would live."""

    skip_optimizer: bool = False  # optimizer state is in the checkpoint but never loaded
    skip_scheduler: bool = False  # LR schedule rebuilt from scratch: warm-up again
    fresh_loader_seed: int | None = None  # loader rebuilt with this seed, at no saved position
    forget_set_epoch: bool = False  # the resumed loop never calls sampler.set_epoch
    offset_every_epoch: bool = False  # Megatron-like: resumed offset re-applied every epoch


@dataclass(frozen=True)
class Interruption:
    """The process stops after step ``at_step``; the next one resumes from ``resume_from``."""

    at_step: int
    resume_from: int
    reason: str = "crash"
    bugs: ResumeBugs = field(default_factory=ResumeBugs)


@dataclass(frozen=True)
class SlowSave:
    """A save that takes ``seconds``; meanwhile the loop consumes ``stalled_batches`` batches
    whose gradients pile up because the optimizer step waits for the save."""

    step: int
    seconds: float
    stalled_batches: int


@dataclass(frozen=True)
class FaultPlan:
    shuffle: bool = True
    save_optimizer: bool = True
    slow_saves: tuple[SlowSave, ...] = ()
    corrupt_label_steps: tuple[int, ...] = ()  # batches whose labels arrive garbled
    interruptions: tuple[Interruption, ...] = ()

    def last_fault_step(self) -> int:
        """The latest step a fault needs the run to reach (0 for a clean run)."""
        steps = [0, *self.corrupt_label_steps]
        steps += [save.step + save.stalled_batches + 1 for save in self.slow_saves]
        steps += [stop.at_step for stop in self.interruptions]
        return max(steps)

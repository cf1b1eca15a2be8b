"""Fault plans: where a run stops, how its resume code goes wrong, which saves stall.

A plan only holds flags and step numbers; the trainer's real code paths (the resume code, the
save path, the batch reader) consult them. Nothing edits the logs after the fact.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

FAULT_KINDS = (
    "none",
    "exact",
    "exact_older",
    "preempt",
    "offset_every_epoch",
    "fresh_seed",
    "position_lost",
    "skip_factor",
    "epoch_off_by_one",
    "set_epoch_forgotten",
    "optimizer_not_saved",
    "optimizer_not_loaded",
    "scheduler_reset",
    "stall_on_save",
    "bad_batches",
    "double",
)
DATA_FAULTS = (
    "offset_every_epoch",
    "fresh_seed",
    "position_lost",
    "skip_factor",
    "epoch_off_by_one",
    "set_epoch_forgotten",
)
STATE_FAULTS = ("optimizer_not_saved", "optimizer_not_loaded", "scheduler_reset")
# Faults whose effect needs at least one full epoch after the resume.
_NEEDS_LATER_EPOCH = ("offset_every_epoch", "set_epoch_forgotten")


@dataclass(frozen=True)
class ResumeBugs:
    """Mistakes in one resume code path; each flag is read where the real bug would live."""

    skip_optimizer: bool = False  # optimizer state in the checkpoint but never loaded
    skip_scheduler: bool = False  # LR schedule rebuilt from scratch
    fresh_seed: int | None = None  # loader rebuilt with this seed, no saved position
    position_lost: bool = False  # same seed, epoch restarts at its head, ends by batch count
    skip_factor: float | None = None  # skips factor x K samples instead of K
    epoch_variant: str | None = None  # "ahead" (epoch+1 at K) | "skip_rest" (epoch+1 at 0)
    # | "behind" (epoch-1 at K)
    # K re-applied at every later epoch start; "short": those epochs end at their normal end;
    # "tail": every epoch from the resumed one on reads its usual number of batches from K,
    # re-reading the last K of the order.
    offset_every_epoch: str | None = None
    forget_set_epoch: str | None = None  # "restored" | "epoch0": set_epoch never called again

    def describe(self) -> str:
        parts = [f"{name}={value}" for name, value in asdict(self).items() if value]
        return ", ".join(parts) or "exact"


@dataclass(frozen=True)
class Interruption:
    """The process stops after ``at_step``; the next one resumes from the newest good save."""

    at_step: int
    reason: str = "crash"
    downtime_s: float = 600.0
    bugs: ResumeBugs = field(default_factory=ResumeBugs)


@dataclass(frozen=True)
class SlowSave:
    """A save taking ``seconds``; meanwhile ``stalled_batches`` batches pile up gradients."""

    step: int
    seconds: float
    stalled_batches: int


@dataclass(frozen=True)
class FaultPlan:
    kind: str = "none"
    save_optimizer: bool = True
    slow_saves: tuple[SlowSave, ...] = ()
    bad_steps: tuple[int, ...] = ()
    bad_mode: str = "labels"  # "labels" | "inputs"
    corrupt_checkpoints: tuple[int, ...] = ()  # saves whose bytes are torn: torch.load fails
    interruptions: tuple[Interruption, ...] = ()

    def params(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Layout:
    """The run's shape as the planner needs it."""

    total_steps: int
    checkpoint_every: int
    steps_per_epoch: float
    samples_per_epoch: int
    global_batch_size: int
    grad_accum: int
    cyclic: bool
    distributed: bool
    shuffled: bool

    def checkpoints(self) -> list[int]:
        return list(range(self.checkpoint_every, self.total_steps, self.checkpoint_every))

    def position(self, step: int) -> tuple[int, int]:
        """Designed (epoch, samples into it) after ``step`` steps."""
        if self.cyclic:
            epoch, offset = divmod(step * self.global_batch_size, self.samples_per_epoch)
            return epoch, offset
        spe = int(self.steps_per_epoch)
        return step // spe, (step % spe) * self.global_batch_size


class Planner:
    def __init__(self, rng: np.random.Generator, layout: Layout) -> None:
        self.rng = rng
        self.layout = layout

    def _pick(self, candidates: list[int]) -> int:
        if not candidates:
            raise ValueError("no checkpoint fits the fault; the run is too short")
        return int(candidates[int(self.rng.integers(len(candidates)))])

    def resume_point(
        self, *, after: int = 0, need_after: float = 0.0, k: str = "nonzero", epoch_min: int = 0
    ) -> int:
        """A checkpoint step to resume from, leaving ``need_after`` steps and a crash window."""
        lay = self.layout
        limit = lay.total_steps - max(need_after, lay.checkpoint_every + 1)
        base = [c for c in lay.checkpoints() if after < c <= limit]
        base = [c for c in base if lay.position(c)[0] >= epoch_min] or base
        if k == "any":
            return self._pick(base)
        if k == "zero":
            return self._pick([c for c in base if lay.position(c)[1] == 0] or base)
        return self._pick([c for c in base if lay.position(c)[1] > 0] or base)

    def crash_after(self, checkpoint: int) -> int:
        """A crash step strictly between ``checkpoint`` and the next save (or the end)."""
        last = min(checkpoint + self.layout.checkpoint_every, self.layout.total_steps) - 1
        return int(self.rng.integers(checkpoint + 1, max(last, checkpoint + 1) + 1))

    def downtime(self) -> float:
        return float(self.rng.uniform(90.0, 2400.0))

    def data_bugs(self, kind: str) -> ResumeBugs:
        rng = self.rng
        if kind == "offset_every_epoch":
            return ResumeBugs(offset_every_epoch=str(rng.choice(["short", "tail"])))
        if kind == "fresh_seed":
            return ResumeBugs(fresh_seed=int(rng.integers(10_000, 2**31 - 1)))
        if kind == "position_lost":
            return ResumeBugs(position_lost=True)
        if kind == "skip_factor":
            factors = [
                2.0,
                0.5,
                float(self.layout.grad_accum) if self.layout.grad_accum > 1 else 3.0,
            ]
            return ResumeBugs(skip_factor=float(rng.choice(factors)))
        if kind == "epoch_off_by_one":
            # With one order for every epoch only skipping the rest of the epoch changes data.
            variants = ["ahead", "skip_rest", "behind"] if self.layout.shuffled else ["skip_rest"]
            return ResumeBugs(epoch_variant=str(rng.choice(variants)))
        if kind == "set_epoch_forgotten":
            return ResumeBugs(forget_set_epoch=str(rng.choice(["restored", "epoch0"])))
        raise ValueError(f"not a data fault: {kind!r}")

    def data_resume(self, kind: str, *, after: int = 0, k: str = "nonzero") -> Interruption:
        bugs = self.data_bugs(kind)
        need = self.layout.steps_per_epoch * 1.3 + self.layout.checkpoint_every
        if kind not in _NEEDS_LATER_EPOCH:
            need = self.layout.checkpoint_every + 1
        epoch_min = int(bugs.epoch_variant == "behind" or bugs.forget_set_epoch == "epoch0")
        c = self.resume_point(after=after, need_after=need, k=k, epoch_min=epoch_min)
        return Interruption(self.crash_after(c), "crash", self.downtime(), bugs)

    def plan(self, kind: str, *, benign: bool = False) -> FaultPlan:
        """A plan for ``kind``; ``benign`` picks a resume at an epoch boundary (K = 0)."""
        lay, rng = self.layout, self.rng
        if kind == "none":
            return FaultPlan(kind)
        if kind in ("exact", *STATE_FAULTS):
            c = self.resume_point(k="any")
            bugs = ResumeBugs(
                skip_optimizer=kind == "optimizer_not_loaded",
                skip_scheduler=kind == "scheduler_reset",
            )
            stop = Interruption(self.crash_after(c), "crash", self.downtime(), bugs)
            return FaultPlan(
                kind, save_optimizer=kind != "optimizer_not_saved", interruptions=(stop,)
            )
        if kind == "exact_older":
            back = int(rng.integers(1, 3))
            newest = self.resume_point(after=back * lay.checkpoint_every, k="any")
            corrupt = tuple(newest - i * lay.checkpoint_every for i in range(back))
            stop = Interruption(self.crash_after(newest), "crash", self.downtime())
            return FaultPlan(kind, corrupt_checkpoints=corrupt, interruptions=(stop,))
        if kind == "preempt":
            c = self.resume_point(k="any")
            return FaultPlan(kind, interruptions=(Interruption(c, "preempted", self.downtime()),))
        if kind in DATA_FAULTS:
            stop = self.data_resume(kind, k="zero" if benign else "nonzero")
            return FaultPlan(kind, interruptions=(stop,))
        if kind == "double":
            c1 = self.resume_point(need_after=lay.total_steps * 0.55, k="any")
            first = Interruption(self.crash_after(c1), "crash", self.downtime())
            kinds = [k for k in DATA_FAULTS if lay.distributed or k != "set_epoch_forgotten"]
            second = self.data_resume(str(rng.choice(kinds)), after=first.at_step)
            return FaultPlan(kind, interruptions=(first, second))
        if kind == "stall_on_save":
            return FaultPlan(kind, slow_saves=self._slow_saves())
        if kind == "bad_batches":
            mode = str(rng.choice(["labels", "labels", "inputs"]))
            return FaultPlan(kind, bad_steps=self._bad_steps(), bad_mode=mode)
        raise ValueError(f"unknown fault {kind!r}; choose from: {', '.join(FAULT_KINDS)}")

    def _slow_saves(self) -> tuple[SlowSave, ...]:
        lay, rng = self.layout, self.rng
        every = lay.checkpoint_every
        high = max(5, min(every - 2, 40))
        saves = [c for c in lay.checkpoints() if c + high + 2 < lay.total_steps]
        count = min(len(saves), int(rng.integers(2, 4)))
        chosen = sorted(int(s) for s in rng.choice(saves, size=count, replace=False))
        return tuple(
            SlowSave(s, float(rng.uniform(18.0, 45.0)), int(rng.integers(4, high + 1)))
            for s in chosen
        )

    def _bad_steps(self) -> tuple[int, ...]:
        lay, rng = self.layout, self.rng
        saves = [0, *lay.checkpoints(), lay.total_steps]
        low, high = int(lay.total_steps * 0.2), lay.total_steps - 12
        candidates = [s for s in range(low, high) if min(abs(s - c) for c in saves) >= 10]
        count = int(rng.integers(3, 6))
        chosen: list[int] = []
        for s in rng.permutation(candidates):
            if all(abs(int(s) - t) >= 15 for t in chosen):
                chosen.append(int(s))
            if len(chosen) >= count:
                break
        return tuple(sorted(chosen))

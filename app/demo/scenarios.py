"""The labelled demo scenarios: one fault plan each, and the ground truth written beside the run."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from app.demo.plan import FaultPlan, Interruption, ResumeBugs, SlowSave, TrainConfig
from app.demo.trainer import ResumeReport, RunResult, train_run
from app.demo.writer import RunWriter

SCENARIOS: dict[str, str] = {
    "clean": "No fault: one process trains to the end.",
    "exact_resume": "Crash at step 437, exact resume from step 400; steps 401-437 are replayed.",
    "preempt_exact": "Stopped right after the save at step 500, exact resume from it.",
    "megatron_offset": (
        "Sequential sampler; after the resume at 300 every later epoch starts at the resumed "
        "in-epoch offset, so the head of the dataset is never read again."
    ),
    "fresh_seed": (
        "Resume at 500 restores model, optimizer, scheduler and RNG, but the loader restarts "
        "with a new seed at the start of the epoch."
    ),
    "optimizer_not_saved": (
        "Checkpoints never hold the optimizer; the resume at 600 restarts AdamW moments from zero."
    ),
    "optimizer_not_loaded": "Optimizer state saved but not restored at the resume from 200.",
    "scheduler_reset": "LR schedule rebuilt from scratch at the resume from 300: warm-up again.",
    "stall_on_save": (
        "Saves at 200/400/600 take ~25 s; meanwhile the loop keeps reading batches and piles up "
        "gradients, then takes one huge step: a loss and grad-norm spike after each save."
    ),
    "natural_spikes": "Four batches with garbled labels make loss spikes; no resume.",
    "double_resume": "Exact resume at 200, then a resume at 600 whose loader gets a new seed.",
    "set_epoch_forgotten": (
        "After the resume at 200 the loop never calls set_epoch: every later epoch repeats one "
        "permutation."
    ),
}


def build_plan(scenario: str, seed: int) -> FaultPlan:
    """The fault plan of ``scenario``; random details (stall lengths) depend only on ``seed``."""
    new_seed = seed + 7919  # what a loader seeded from the clock might get instead
    if scenario == "clean":
        return FaultPlan()
    if scenario == "exact_resume":
        return FaultPlan(interruptions=(Interruption(437, 400),))
    if scenario == "preempt_exact":
        return FaultPlan(interruptions=(Interruption(500, 500),))
    if scenario == "megatron_offset":
        bugs = ResumeBugs(offset_every_epoch=True)
        return FaultPlan(shuffle=False, interruptions=(Interruption(337, 300, bugs=bugs),))
    if scenario == "fresh_seed":
        bugs = ResumeBugs(fresh_loader_seed=new_seed)
        return FaultPlan(interruptions=(Interruption(553, 500, bugs=bugs),))
    if scenario == "optimizer_not_saved":
        return FaultPlan(save_optimizer=False, interruptions=(Interruption(661, 600),))
    if scenario == "optimizer_not_loaded":
        bugs = ResumeBugs(skip_optimizer=True)
        return FaultPlan(interruptions=(Interruption(229, 200, bugs=bugs),))
    if scenario == "scheduler_reset":
        bugs = ResumeBugs(skip_scheduler=True)
        return FaultPlan(interruptions=(Interruption(342, 300, bugs=bugs),))
    if scenario == "stall_on_save":
        rng = np.random.default_rng([seed, 0x57A11])
        saves = tuple(
            SlowSave(step, float(rng.uniform(23.0, 27.0)), int(rng.integers(20, 28)))
            for step in (200, 400, 600)
        )
        return FaultPlan(slow_saves=saves)
    if scenario == "natural_spikes":
        return FaultPlan(corrupt_label_steps=(163, 347, 538, 721))
    if scenario == "double_resume":
        bugs = ResumeBugs(fresh_loader_seed=new_seed)
        return FaultPlan(interruptions=(Interruption(237, 200), Interruption(637, 600, bugs=bugs)))
    if scenario == "set_epoch_forgotten":
        bugs = ResumeBugs(forget_set_epoch=True)
        return FaultPlan(interruptions=(Interruption(231, 200, bugs=bugs),))
    raise ValueError(f"unknown scenario {scenario!r}; choose from: {', '.join(SCENARIOS)}")


def generate_run(
    scenario: str,
    out_dir: Path,
    *,
    seed: int = 1234,
    start_time: float | None = None,
    epochs: int = 15,
) -> Path:
    """Train ``scenario``, write ``<out_dir>/<scenario>/`` and return that path."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; choose from: {', '.join(SCENARIOS)}")
    plan = build_plan(scenario, seed)
    config = TrainConfig(seed=seed, epochs=epochs)
    run_dir = Path(out_dir) / scenario
    result = train_run(
        run_dir, config, plan, start_time=time.time() if start_time is None else start_time
    )
    RunWriter(run_dir).write_truth(build_truth(scenario, plan, result))
    return run_dir


def generate_all(
    out_dir: Path, scenarios: Iterable[str] | None = None, **kwargs: Any
) -> list[Path]:
    """Generate several scenarios (all of them by default) under ``out_dir``."""
    names = list(SCENARIOS) if scenarios is None else list(scenarios)
    return [generate_run(name, out_dir, **kwargs) for name in names]


def build_truth(scenario: str, plan: FaultPlan, result: RunResult) -> dict[str, Any]:
    suspects: list[dict[str, Any]] = []
    for stop, report in zip(plan.interruptions, result.resumes, strict=True):
        suspects += _suspects(stop.bugs, report)
    return {
        "scenario": scenario,
        "resumes": [report.at for report in result.resumes],
        "suspect_resumes": suspects,
        "checkpoint_spikes": [save.step for save in plan.slow_saves],
        "non_checkpoint_spikes": list(plan.corrupt_label_steps),
        "dataset_size": result.dataset_size,
        "steps_per_epoch": result.steps_per_epoch,
        "total_steps": result.total_steps,
    }


def _suspects(bugs: ResumeBugs, report: ResumeReport) -> list[dict[str, Any]]:
    """Ground-truth labels for one resume, from what the resume code actually did."""
    out: list[dict[str, Any]] = []

    def add(kind: str, detail: str) -> None:
        out.append({"at": report.at, "kind": kind, "detail": detail})

    if "optimizer" not in report.saved:
        add(
            "incomplete_checkpoint",
            f"{report.checkpoint} has no optimizer state; AdamW moments restart from zero",
        )
    elif "optimizer" not in report.restored:
        add(
            "state_not_restored",
            f"optimizer state saved in {report.checkpoint} but not loaded;"
            " AdamW moments restart from zero",
        )
    if "scheduler" not in report.restored:
        add(
            "lr_discontinuity",
            f"LR schedule rebuilt from scratch: warm-up restarts"
            f" (lr {report.lr_saved:.3g} -> {report.lr_now:.3g})",
        )
    saved, now = report.loader_saved, report.loader_now
    if "dataloader" not in report.restored:
        was = (
            "no saved loader state"
            if saved is None
            else (
                f"saved seed {saved['seed']}, {saved['consumed_in_epoch']} samples into epoch"
                f" {saved['epoch']}"
            )
        )
        add(
            "data_drift",
            f"loader restarted with seed {now['seed']} at the start of epoch {now['epoch']}"
            f" ({was}): samples repeated and skipped",
        )
    if bugs.offset_every_epoch and saved is not None:
        add(
            "data_drift",
            f"every epoch after the resume starts at offset {saved['consumed_in_epoch']}:"
            " the head of the dataset is skipped",
        )
    if bugs.forget_set_epoch:
        add(
            "order_repeat",
            f"set_epoch not called after the resume: every epoch from {now['epoch']} on replays"
            " the same permutation",
        )
    return out

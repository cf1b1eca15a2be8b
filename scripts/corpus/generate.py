"""Generate a labelled corpus of real (tiny) torch training runs with injected resume faults.

    python -m scripts.corpus.generate OUT_DIR [--runs N] [--seed S] [--quick] [--jobs J]

Each run is ``OUT_DIR/<index>_<fault>_<task>/`` in Runwatch's run-directory format with a
``truth.json``. Everything an analyzer could overfit to is drawn per run: task, dataset size,
batch size, sampler, checkpoint interval, crash step, resume checkpoint, in-epoch position, seeds,
learning rate and schedule, label noise, logging interval, which files exist.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from scripts.corpus.faults import DATA_FAULTS, FAULT_KINDS, STATE_FAULTS, FaultPlan, Layout, Planner
from scripts.corpus.labels import build_truth, spike_ratio
from scripts.corpus.samplers import IndexedTensors, SamplerSpec
from scripts.corpus.tasks import TASKS, make_task
from scripts.corpus.trainer import SCHEDULERS, RunConfig, RunContext, SimClock, train_run
from scripts.corpus.writer import RunWriter

DEFAULT_RUNS = 60
QUICK_RUNS = 16
MAX_DRAWS = 4  # a run whose fault changed nothing by chance is drawn again
START = 1_717_200_000.0
NICE_INTERVALS = (25, 30, 40, 50, 60, 75, 80, 100, 120, 125, 150, 200, 250)
# After three shuffled rounds of every fault, the full corpus adds these.
EXTRA_ROUND = (*DATA_FAULTS, "exact", "double", "preempt", "exact_older", "scheduler_reset")


@dataclass(frozen=True)
class Slot:
    """What one corpus entry must be; the rest is drawn at random."""

    index: int
    fault: str
    task: str
    sampler: str
    events: bool = True
    samples: bool = True
    benign: bool = False  # deliberately placed so the fault changes nothing
    quick: bool = False


@dataclass
class Built:
    config: RunConfig
    plan: FaultPlan
    params: dict[str, Any] = field(default_factory=dict)


def _allowed_samplers(fault: str) -> list[str]:
    if fault == "set_epoch_forgotten":
        return ["torch_distributed"]
    return ["torch_distributed", "torch_random", "megatron_cyclic", "sequential"]


def schedule(runs: int, *, quick: bool, seed: int) -> list[Slot]:
    rng = np.random.default_rng([seed, 0x5C4ED])
    faults: list[str] = []
    while len(faults) < runs:
        if quick:
            faults += FAULT_KINDS
        elif len(faults) < 3 * len(FAULT_KINDS):
            faults += [str(f) for f in rng.permutation(FAULT_KINDS)]
        else:
            faults += [*EXTRA_ROUND, *FAULT_KINDS]
    seen: dict[str, int] = {}
    pairs: dict[tuple[str, str], int] = {}
    used: dict[str, int] = {}

    def balanced(fault: str, options: list[str] | tuple[str, ...]) -> str:
        """Spread options over each fault's occurrences first, then over the whole corpus."""

        def load(option: str) -> tuple[int, int]:
            return pairs.get((fault, option), 0), used.get(option, 0)

        fewest = min(load(o) for o in options)
        return str(rng.choice([o for o in options if load(o) == fewest]))

    def count(fault: str, option: str) -> None:
        pairs[fault, option] = pairs.get((fault, option), 0) + 1
        used[option] = used.get(option, 0) + 1

    slots = []
    for index, fault in enumerate(faults[:runs]):
        n = seen[fault] = seen.get(fault, -1) + 1
        sampler = balanced(fault, _allowed_samplers(fault))
        benign = not quick and n == 1 and fault in ("skip_factor", "set_epoch_forgotten")
        if benign and fault == "set_epoch_forgotten":
            sampler = "sequential"  # one order for every epoch: forgetting set_epoch is harmless
        elif benign and sampler == "megatron_cyclic":
            sampler = "torch_random"  # saves land on epoch ends only with batch-aligned epochs
        count(fault, sampler)
        no_events = fault in ("exact", "fresh_seed") and (
            n % 2 == 1 or (quick and fault == "exact")
        )
        no_samples = fault in ("none", *STATE_FAULTS) and (
            n % 3 == 1 or (quick and fault == "optimizer_not_loaded")
        )
        task = balanced(fault, TASKS)
        count(fault, task)
        slots.append(
            Slot(index, fault, task, sampler, not no_events, not no_samples, benign, quick)
        )
    return slots


def build(slot: Slot, rng: np.random.Generator) -> Built:
    """Draw one run's configuration and fault plan."""
    gbs = int(rng.choice([16, 24, 32, 48, 64]))
    accum = int(rng.choice([a for a in (1, 1, 1, 1, 2, 2, 4) if gbs % a == 0]))
    world = 1
    if slot.sampler == "torch_distributed" and rng.random() < 0.3:
        world = int(rng.choice([w for w in (2, 4) if gbs % w == 0]))
    micro = gbs // accum // world
    low, high = {"clusters": (600, 3000), "regression": (500, 2500), "chars": (800, 3000)}[
        slot.task
    ]
    size = int(rng.integers(max(low, 10 * gbs), min(high, 90 * gbs) + 1))
    cyclic = slot.sampler == "megatron_cyclic"
    if cyclic:
        size -= size % micro
    drop_last = not cyclic and rng.random() < 0.75
    seed = int(rng.choice([0, 42, 1234, int(rng.integers(1, 2**16))]))
    spec = SamplerSpec(
        slot.sampler,
        size,
        gbs,
        seed,
        drop_last=drop_last,
        world_size=world,
        seed_mode=str(rng.choice(["epoch", "seed_plus_epoch"])) if cyclic else "epoch",
    )
    spe = spec.steps_per_epoch
    target = rng.uniform(150, 350) if slot.quick else rng.uniform(300, 1100)
    epochs = int(min(max(round(target / spe), 3), 40))
    if slot.fault in ("offset_every_epoch", "set_epoch_forgotten", "double"):
        epochs = max(epochs, 4)
    total = int(epochs * spe)
    raw = total / rng.uniform(6, 13)
    every = min(NICE_INTERVALS, key=lambda c: abs(c - raw))
    if rng.random() < 0.25:
        every = max(25, round(raw))
    if slot.benign and not spec.cyclic:  # some saves land exactly on epoch boundaries
        every = int(spe) * math.ceil(25 / spe)
    fixed_log = slot.fault in ("stall_on_save", "bad_batches")
    config = RunConfig(
        task=slot.task,
        sampler=spec,
        total_steps=total,
        grad_accum=accum,
        hidden=int(rng.choice([32, 48, 64])),
        lr=float(math.exp(rng.uniform(math.log(1e-3), math.log(8e-3)))),
        weight_decay=float(rng.choice([0.0, 0.01, 0.05])),
        scheduler=str(rng.choice(SCHEDULERS)),
        warmup_steps=int(total * rng.uniform(0.03, 0.12)),
        max_grad_norm=[1.0, 2.0, 5.0, None][int(rng.integers(4))],
        augment=float(rng.uniform(0.02, 0.2)),
        model_seed=int(rng.integers(0, 2**20)),
        checkpoint_every=every,
        log_every=1 if fixed_log or rng.random() < 0.7 else int(rng.choice([5, 10])),
        eval_every=0 if rng.random() < 0.3 else int(rng.choice([25, 50, 100])),
        epoch_after_advance=bool(rng.random() < 0.5),
        save_seconds=float(rng.uniform(0.3, 4.0)),
        start_time=START + slot.index * 7 * 3600.0 + float(rng.uniform(0, 3600)),
    )
    distributed = slot.sampler == "torch_distributed"
    layout = Layout(
        total, every, spe, spec.usable, gbs, accum, spec.cyclic, distributed, spec.shuffle
    )
    plan = Planner(rng, layout).plan(slot.fault, benign=slot.benign)
    params = {
        "label_noise": float(rng.choice([0.0, rng.uniform(0.0, 0.15)])),
        "data_seed": int(rng.integers(0, 2**20)),
        "epochs": epochs,
        "micro_batch_size": micro,
    }
    return Built(config, plan, params)


def _config_doc(built: Built, declared: bool) -> dict[str, Any]:
    cfg, params = built.config, built.params
    doc: dict[str, Any] = {
        "task": cfg.task,
        "global_batch_size": cfg.sampler.global_batch_size,
        "micro_batch_size": params["micro_batch_size"],
        "grad_accum": cfg.grad_accum,
        "dataset_size": cfg.sampler.dataset_size,
        "total_steps": cfg.total_steps,
        "epochs": params["epochs"],
        "optimizer": {"kind": "AdamW", "lr": cfg.lr, "weight_decay": cfg.weight_decay},
        "scheduler": {"kind": cfg.scheduler, "warmup_steps": cfg.warmup_steps},
        "max_grad_norm": cfg.max_grad_norm,
        "checkpoint_every": cfg.checkpoint_every,
        "log_every": cfg.log_every,
        "seed": cfg.model_seed,
    }
    if declared:
        doc["sampler"] = cfg.sampler.config()
    return doc


def _expected(slot: Slot, truth: dict[str, Any]) -> bool:
    """Whether the run shows the fault it was built for (a by-chance no-op is redrawn)."""
    kinds = [s["kind"] for s in truth["suspect_resumes"]]
    if slot.benign:
        return not kinds
    if slot.fault in (*DATA_FAULTS, "double"):
        return len(kinds) == 1 and kinds[0] in ("data_drift", "order_repeat")
    if slot.fault in STATE_FAULTS:
        return len(kinds) == 1
    if slot.fault == "stall_on_save":
        return bool(truth["checkpoint_spikes"])
    if slot.fault == "bad_batches":
        return bool(truth["non_checkpoint_spikes"])
    return not kinds


def generate_run(slot: Slot, out_dir: Path, *, seed: int = 0) -> tuple[Path, dict[str, Any]]:
    name = f"{slot.index:02d}_{slot.fault}_{slot.task}"
    run_dir = out_dir / name
    for attempt in range(MAX_DRAWS):
        rng = np.random.default_rng([seed, slot.index, attempt])
        built = build(slot, rng)
        declared = bool(rng.random() < 0.6)
        has_config = declared or rng.random() < 0.8
        writer = RunWriter(
            run_dir, events=slot.events, samples=slot.samples, evals=built.config.eval_every > 0
        )
        writer.reset()
        if has_config:
            writer.write_config(_config_doc(built, declared))
        params = built.params
        task = make_task(
            slot.task, built.config.sampler.dataset_size, params["data_seed"], params["label_noise"]
        )
        ctx = RunContext(
            config=built.config,
            task=task,
            plan=built.plan,
            writer=writer,
            clock=SimClock(built.config.start_time),
            dataset=IndexedTensors(task.x, task.y),
        )
        train_run(ctx)
        truth = build_truth(ctx, name)
        if _expected(slot, truth) or attempt == MAX_DRAWS - 1:
            break
    truth["params"] = _params(slot, built, ctx, declared, has_config, attempt)
    writer.write_truth(truth)
    return run_dir, truth


def _params(
    slot: Slot, built: Built, ctx: RunContext, declared: bool, has_config: bool, attempt: int
) -> dict[str, Any]:
    cfg = built.config
    config = asdict(cfg)
    config["sampler"] = cfg.sampler.config()
    config["global_batch_size"] = cfg.sampler.global_batch_size
    config["dataset_size"] = cfg.sampler.dataset_size
    resumes = []
    for r in ctx.resumes:
        resumes.append(
            {
                "checkpoint": r.checkpoint,
                "at": r.at,
                "crash_step": r.crash_step,
                "skipped_checkpoints": r.skipped,
                "restored": r.restored,
                "loader_saved": r.loader_saved,
                "loader_now": r.loader_now,
                "lr_saved": r.lr_saved,
                "lr_now": r.lr_now,
            }
        )
    return {
        **config,
        **built.params,
        "plan": built.plan.params(),
        "resume_details": resumes,
        "stalls": {
            str(k): {"missing_steps": v[:2], "spike_step": v[2]} for k, v in ctx.stalls.items()
        },
        "stall_loss_ratio": {str(k): spike_ratio(ctx.losses, v[2]) for k, v in ctx.stalls.items()},
        "bad_batch_loss_ratio": {str(s): spike_ratio(ctx.losses, s) for s in built.plan.bad_steps},
        "files": {
            "events": slot.events,
            "samples": slot.samples,
            "evals": cfg.eval_every > 0,
            "config": has_config,
            "sampler_declared": declared,
        },
        "benign_by_design": slot.benign,
        "redraws": attempt,
    }


def _run_slot(slot: Slot, out_dir: Path, seed: int) -> tuple[Path, dict[str, Any], float]:
    began = time.perf_counter()
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with warnings.catch_warnings(), torch.autograd.set_multithreading_enabled(False):
            warnings.filterwarnings("ignore", module="torch.optim.lr_scheduler")
            path, truth = generate_run(slot, out_dir, seed=seed)
    finally:
        torch.set_num_threads(previous)
    return path, truth, time.perf_counter() - began


def generate_corpus(
    out_dir: Path,
    *,
    runs: int | None = None,
    seed: int = 0,
    quick: bool = False,
    jobs: int = 1,
    verbose: bool = False,
) -> list[Path]:
    """Write the corpus under ``out_dir``; returns the run directories in index order.

    The corpus depends only on ``seed``, ``quick`` and ``runs`` (times aside: the simulated
    clock adds real compute time). ``jobs`` > 1 trains runs in that many worker processes.
    """
    count = runs if runs is not None else (QUICK_RUNS if quick else DEFAULT_RUNS)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    slots = schedule(count, quick=quick, seed=seed)
    started = time.perf_counter()

    def report(slot: Slot, path: Path, truth: dict[str, Any], seconds: float) -> None:
        if verbose:
            labels = ",".join(f"{s['kind']}@{s['at']}" for s in truth["suspect_resumes"]) or "-"
            print(
                f"[{slot.index + 1}/{count}] {path.name}: sampler={slot.sampler}"
                f" steps={truth['total_steps']} resumes={truth['resumes']} suspects={labels}"
                f" ({seconds:.2f}s)",
                flush=True,
            )

    paths: dict[int, Path] = {}
    if jobs > 1:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(jobs, mp_context=context) as pool:
            futures = {pool.submit(_run_slot, slot, out_dir, seed): slot for slot in slots}
            for future in as_completed(futures):
                path, truth, seconds = future.result()
                report(futures[future], path, truth, seconds)
                paths[futures[future].index] = path
    else:
        for slot in slots:
            path, truth, seconds = _run_slot(slot, out_dir, seed)
            report(slot, path, truth, seconds)
            paths[slot.index] = path
    if verbose:
        print(f"{count} runs in {time.perf_counter() - started:.1f}s -> {out_dir}")
    return [paths[i] for i in sorted(paths)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="about 16 small runs, for CI")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    args = parser.parse_args(argv)
    generate_corpus(
        args.out_dir,
        runs=args.runs,
        seed=args.seed,
        quick=args.quick,
        jobs=args.jobs,
        verbose=True,
    )


if __name__ == "__main__":
    main()

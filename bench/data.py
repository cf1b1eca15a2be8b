"""The benchmark inputs, generated once per size and cached: a metrics log of N steps x 10
metrics, a sample trace of N steps x B ids, TensorBoard event files and a W&B offline run.

Every file is written by a finished marker-then-rename, so an interrupted run never leaves a
half-written input in the cache.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

# The ten metrics of every logged step: names a training loop writes (some are aliases).
METRIC_NAMES = (
    "loss",
    "lr",
    "grad_norm",
    "loss_scale",
    "tokens",
    "throughput",
    "train/accuracy",
    "perplexity",
    "mfu",
    "memory/allocated_gb",
)
T0 = 1.7e9
STEP_SECONDS = 0.25


def cache_dir() -> Path:
    """``RUNWATCH_BENCH_CACHE`` or the user's cache folder; the inputs are large (about 1 GB)."""
    env = os.environ.get("RUNWATCH_BENCH_CACHE")
    base = Path(env) if env else Path.home() / ".cache" / "runwatch-bench"
    base.mkdir(parents=True, exist_ok=True)
    return base


@contextmanager
def _building(final: Path) -> Iterator[Path]:
    """A scratch path that becomes ``final`` only when the block completes."""
    scratch = final.with_name(final.name + ".partial")
    if scratch.is_dir():
        shutil.rmtree(scratch)
    elif scratch.exists():
        scratch.unlink()
    yield scratch
    scratch.rename(final)


def metric_columns(steps: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Step, time and the ten metric columns (float64, ``tokens`` integral)."""
    rng = np.random.default_rng(seed)
    step = np.arange(1, steps + 1, dtype=np.int64)
    progress = step / steps
    loss = np.exp(rng.normal(np.log(4.0 - 2.5 * progress), 0.03))
    return {
        "step": step,
        "time": T0 + step * STEP_SECONDS + rng.uniform(0, 0.01, steps),
        "loss": loss,
        "lr": 3e-4 * np.cos(progress * np.pi / 2),
        "grad_norm": np.exp(rng.normal(0.0, 0.3, steps)),
        "loss_scale": np.full(steps, 65536.0),
        "tokens": (step * 524_288).astype(np.float64),
        "throughput": rng.normal(410.0, 6.0, steps),
        "train/accuracy": 1 - loss / 5,
        "perplexity": np.exp(loss),
        "mfu": rng.uniform(0.38, 0.42, steps),
        "memory/allocated_gb": rng.uniform(61.0, 63.0, steps),
    }


def metrics_jsonl(steps: int) -> Path:
    """``<cache>/metrics-<steps>/metrics.jsonl``: one line per step, step + time + 10 metrics."""
    folder = cache_dir() / f"metrics-{steps}"
    if (folder / "metrics.jsonl").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    cols = metric_columns(steps)
    names = ("step", "time", *METRIC_NAMES)
    with _building(folder / "metrics.jsonl") as path, path.open("w") as out:
        for lo in range(0, steps, 100_000):
            hi = min(lo + 100_000, steps)
            columns = [
                cols[n][lo:hi].astype(np.int64).tolist()
                if n in ("step", "tokens")
                else cols[n][lo:hi].tolist()
                for n in names
            ]
            keys = [f'"{n}": ' for n in names]
            out.write(
                "".join(
                    "{" + ", ".join(k + repr(v) for k, v in zip(keys, row, strict=True)) + "}\n"
                    for row in zip(*columns, strict=True)
                )
            )
    return folder


def samples_run(steps: int, batch: int, epochs: int = 10) -> Path:
    """``<cache>/samples-<steps>x<batch>/``: metrics.jsonl (loss, lr) and samples.jsonl with
    ``batch`` ids per step from a shuffled sampler over ``steps * batch / epochs`` samples."""
    folder = cache_dir() / f"samples-{steps}x{batch}"
    if (folder / "samples.jsonl").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    cols = metric_columns(steps)
    with _building(folder / "metrics.jsonl") as path, path.open("w") as out:
        columns = zip(*(cols[n].tolist() for n in ("step", "time", "loss", "lr")), strict=True)
        for step, when, loss, lr in columns:
            out.write(f'{{"step": {step}, "time": {when!r}, "loss": {loss!r}, "lr": {lr!r}}}\n')
    size = steps * batch // epochs
    config = {"dataset_size": size, "global_batch_size": batch, "seed": 7, "shuffle": True}
    (folder / "config.json").write_text(json.dumps(config) + "\n")
    rng = np.random.default_rng(7)
    per_epoch = steps // epochs
    with _building(folder / "samples.jsonl") as path, path.open("w") as out:
        for epoch in range(epochs):
            order = rng.permutation(size).reshape(per_epoch, batch)
            for row in range(per_epoch):
                step = epoch * per_epoch + row + 1
                ids = ", ".join(map(str, order[row].tolist()))
                out.write(f'{{"step": {step}, "sample_ids": [{ids}]}}\n')
    return folder


def tensorboard_run(points: int, tags: int = 10) -> Path:
    """``<cache>/tensorboard-<points>/``: one event file, ``points / tags`` steps of ``tags``
    scalars, written by tensorboardX."""
    from tensorboardX import SummaryWriter

    folder = cache_dir() / f"tensorboard-{points}"
    if folder.exists():
        return folder
    steps = points // tags
    cols = metric_columns(steps)
    with _building(folder) as scratch:
        writer = SummaryWriter(logdir=str(scratch), max_queue=10_000, flush_secs=3600)
        for i in range(steps):
            step = int(cols["step"][i])
            when = float(cols["time"][i])
            for name in METRIC_NAMES[:tags]:
                writer.add_scalar(name, float(cols[name][i]), step, walltime=when)
        writer.close()
    return folder


def wandb_run(points: int, keys: int = 10) -> Path:
    """``<cache>/wandb-<points>/``: a W&B offline run written by the real client, ``points /
    keys`` history rows of ``keys`` metrics. Slow to write (the client's own speed): cached."""
    folder = cache_dir() / f"wandb-{points}"
    if folder.exists():
        return folder
    steps = points // keys
    cols = metric_columns(steps)
    with _building(folder) as scratch:
        scratch.mkdir()
        _write_wandb(scratch, steps, cols, keys)
    return folder


def _write_wandb(root: Path, steps: int, cols: dict[str, np.ndarray], keys: int) -> None:
    import wandb

    env = {
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_DISABLE_GIT": "true",
        "WANDB_DISABLE_CODE": "true",
        "WANDB__DISABLE_STATS": "true",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        settings = wandb.Settings(x_disable_stats=True, x_disable_meta=True, console="off")
        run = wandb.init(project="bench", dir=str(root), settings=settings)
        names = METRIC_NAMES[:keys]
        for i in range(steps):
            run.log({name: float(cols[name][i]) for name in names}, step=int(cols["step"][i]))
        run.finish()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

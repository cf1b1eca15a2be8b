"""Analysis time for a run with 100M sample ids (100,000 steps x 1,024 ids).

A shuffled sampler over 10,240,000 samples (10 epochs), one exact resume with a replay, and
loss / LR / grad-norm series. Prints seconds and peak RSS for building the arrays and for the
full analysis (`app.analysis.report.analyze_run`). Run: python -m bench.analysis_100m
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np

from app.analysis.model import CheckpointInfo, RunData, SegmentInfo, Series, Trace
from app.analysis.report import analyze_run

COMPONENTS = frozenset({"model", "optimizer", "scheduler", "rng", "dataloader"})


def build(
    steps: int, batch: int, epochs: int, resume: int, crash: int, seed: int = 7, drift: bool = False
) -> RunData:
    spe = steps // epochs
    n = spe * batch
    rng = np.random.default_rng(seed)
    ids = np.concatenate([rng.permutation(n) for _ in range(epochs)]).astype(np.int64)
    if drift:  # the resume restarts the loader with a fresh seed and no position
        fresh = np.random.default_rng(seed + 1)
        tail = np.concatenate([fresh.permutation(n) for _ in range(epochs)])
        ids[resume * batch :] = tail[: ids.size - resume * batch]
    all_steps = np.arange(1, steps + 1, dtype=np.int64)
    segments = (all_steps > resume).astype(np.uint16)
    trace = Trace(all_steps, np.full(steps, batch, dtype=np.int64), ids, segments)
    replay_rows = np.arange(resume, crash)
    replayed = Trace(
        all_steps[replay_rows],
        np.full(replay_rows.size, batch, dtype=np.int64),
        ids[resume * batch : crash * batch].copy(),
        np.zeros(replay_rows.size, dtype=np.uint16),
    )
    t = all_steps.astype(float)
    lr = 3e-4 * np.cos(np.linspace(0, 1.5, steps))
    loss = np.exp(rng.normal(np.log(np.linspace(4, 1.5, steps)), 0.05))
    grad = np.exp(rng.normal(0, 0.2, steps))
    metrics = {
        "lr": Series(all_steps, lr, t, segments),
        "loss": Series(all_steps, loss, t, segments),
        "grad_norm": Series(all_steps, grad, t, segments),
    }
    checkpoints = [
        CheckpointInfo(
            name=f"iter_{s:07d}",
            step=s,
            consumed_samples=s * batch,
            epoch=s // spe,
            consumed_in_epoch=(s % spe) * batch,
            seed=seed,
            dataset_size=n,
            global_batch_size=batch,
            components=COMPONENTS,
        )
        for s in range(5_000, steps + 1, 5_000)
    ]
    name = f"iter_{resume:07d}"
    return RunData(
        segments=[
            SegmentInfo(0, 0, crash, exit_reason="crash"),
            SegmentInfo(1, resume, steps, name, name, resume, sorted(COMPONENTS)),
        ],
        checkpoints=checkpoints,
        metrics=metrics,
        trace=trace,
        replayed_trace=replayed,
        dataset_size=n,
        global_batch_size=batch,
    )


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1_024)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--drift", action="store_true", help="make the resume a fresh-seed one")
    parser.add_argument("--json", help="write the result to this file")
    args = parser.parse_args()
    started = time.perf_counter()
    run = build(args.steps, args.batch, args.epochs, 55_000, 55_700, drift=args.drift)
    built = time.perf_counter() - started
    started = time.perf_counter()
    report = analyze_run(run)
    analysed = time.perf_counter() - started
    result = {
        "sample_ids": int(run.trace.ids.size) if run.trace else 0,
        "build_seconds": round(built, 2),
        "analysis_seconds": round(analysed, 2),
        "peak_rss_mb": round(peak_rss_mb()),
        "verdict": report.verdict,
        "findings": [f.kind for f in report.findings],
    }
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()

"""Synthetic runs for analyzer unit tests: a sampler with one resume and an optional fault.

Step s (from 1) consumes ``batch`` ids. A faulty resume changes which ids the steps after it
get, the way the named real-world bug does; the superseded trace holds the steps the crashed
process ran after the checkpoint.
"""

from __future__ import annotations

import numpy as np

from app.analysis.model import CheckpointInfo, RunData, SegmentInfo, Series, Trace

COMPONENTS = frozenset({"model", "optimizer", "scheduler", "rng", "dataloader"})


def design_order(epoch: int, n: int, seed: int, shuffle: bool) -> np.ndarray:
    if not shuffle:
        return np.arange(n)
    return np.random.default_rng(seed + epoch).permutation(n)


def faulty_stream(
    fault: str, n: int, batch: int, seed: int, shuffle: bool, resume: int, steps: int
) -> list[np.ndarray]:
    """Batches for steps resume+1 .. steps under ``fault``."""
    spe = n // batch
    epoch, k = divmod(resume, spe)  # k steps of ``epoch`` were done at the resume
    out: list[np.ndarray] = []

    def take(order: np.ndarray, first: int, count: int) -> None:
        for j in range(first, first + count):
            out.append(order[j * batch : (j + 1) * batch])

    if fault in ("exact", "set_epoch_forgotten"):
        take(design_order(epoch, n, seed, shuffle), k, spe - k)
        e = epoch + 1
        while len(out) < steps - resume:
            order_epoch = epoch if fault == "set_epoch_forgotten" else e
            take(design_order(order_epoch, n, seed, shuffle), 0, spe)
            e += 1
    elif fault == "fresh_seed":
        e = 0
        while len(out) < steps - resume:
            take(design_order(e, n, seed + 7919, shuffle), 0, spe)
            e += 1
    elif fault == "position_lost":
        take(design_order(epoch, n, seed, shuffle), 0, spe - k)
        e = epoch + 1
        while len(out) < steps - resume:
            take(design_order(e, n, seed, shuffle), 0, spe)
            e += 1
    elif fault == "offset_every_epoch":
        e = epoch
        while len(out) < steps - resume:
            take(design_order(e, n, seed, shuffle), k, spe - k)
            e += 1
    elif fault == "skip_factor":
        take(design_order(epoch, n, seed, shuffle), min(2 * k, spe), spe - min(2 * k, spe))
        e = epoch + 1
        while len(out) < steps - resume:
            take(design_order(e, n, seed, shuffle), 0, spe)
            e += 1
    elif fault == "epoch_off_by_one":
        take(design_order(epoch + 1, n, seed, shuffle), k, spe - k)
        e = epoch + 2
        while len(out) < steps - resume:
            take(design_order(e, n, seed, shuffle), 0, spe)
            e += 1
    else:
        raise ValueError(fault)
    return out[: steps - resume]


def build_run(
    *,
    fault: str | None = None,
    n: int = 400,
    batch: int = 8,
    epochs: int = 6,
    seed: int = 3,
    shuffle: bool = True,
    resume: int = 120,
    crash: int = 135,
    restored: frozenset[str] = COMPONENTS,
    components: frozenset[str] = COMPONENTS,
    every: int = 20,
) -> RunData:
    spe = n // batch
    steps = epochs * spe
    designed = [
        design_order(e, n, seed, shuffle)[j * batch : (j + 1) * batch]
        for e in range(epochs)
        for j in range(spe)
    ]
    segments = [SegmentInfo(0, 0, steps if fault is None else crash, exit_reason="crash")]
    if fault is None:
        batches = designed
        replayed = None
        seg = np.zeros(steps, dtype=np.uint16)
    else:
        after = faulty_stream(fault, n, batch, seed, shuffle, resume, steps)
        batches = designed[:resume] + after
        seg = np.concatenate([np.zeros(resume), np.ones(steps - resume)]).astype(np.uint16)
        replayed = _trace(
            np.arange(resume + 1, crash + 1), designed[resume:crash], np.zeros(crash - resume)
        )
        name = f"step_{resume:06d}"
        segments.append(
            SegmentInfo(1, resume, steps, f"checkpoints/{name}", name, resume, sorted(restored))
        )
    trace = _trace(np.arange(1, steps + 1), batches, seg)
    checkpoints = [
        CheckpointInfo(
            name=f"step_{s:06d}",
            step=s,
            consumed_samples=s * batch,
            epoch=(s * batch) // (spe * batch),
            consumed_in_epoch=(s * batch) % (spe * batch),
            seed=seed,
            shuffle=shuffle,
            dataset_size=n,
            global_batch_size=batch,
            components=components,
        )
        for s in range(every, steps + 1, every)
        if fault is None or s <= resume or s > resume
    ]
    lr = Series(
        np.arange(1, steps + 1),
        1e-3 * np.cos(np.linspace(0, 1.4, steps)),
        np.arange(steps, dtype=float),
        seg,
    )
    return RunData(
        segments=segments,
        checkpoints=checkpoints,
        metrics={"lr": lr},
        trace=trace,
        replayed_trace=replayed,
        dataset_size=n,
        global_batch_size=batch,
    )


def _trace(steps: np.ndarray, batches: list[np.ndarray], segments: np.ndarray) -> Trace:
    return Trace(
        steps=np.asarray(steps, dtype=np.int64),
        counts=np.array([b.size for b in batches], dtype=np.int64),
        ids=np.concatenate(batches).astype(np.int64) if batches else np.zeros(0, np.int64),
        segments=np.asarray(segments, dtype=np.uint16),
    )

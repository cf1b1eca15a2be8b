"""Coverage summarized in parts (windows of whole epochs) and merged gives exactly the report
of the single-process analysis: findings, verdict, checkpoint verdicts, plan and heatmap, for
every fault of the synthetic runs, both epoch layouts, and parts cut 1, 3 or all epochs wide."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import pytest

from app.analysis.coverage import last_trace_step
from app.analysis.coverage_parts import (
    EpochSummary,
    MergedCoverage,
    epoch_parts,
    step_window,
    summarize_epochs,
)
from app.analysis.epochs import EpochPlan, plan_epochs
from app.analysis.model import CheckpointInfo, RunData, SegmentInfo, Trace
from app.analysis.report import AnalysisReport, analyze_run
from tests.analysis.synth import COMPONENTS, build_run

FAULTS = [
    None,
    "exact",
    "fresh_seed",
    "offset_every_epoch",
    "set_epoch_forgotten",
    "position_lost",
    "skip_factor",
    "epoch_off_by_one",
]
EPOCHS_PER_PART = [1, 3, 100]


class MemoryIds:
    """An ``IdReader`` over an array, counting what is read."""

    def __init__(self, ids: np.ndarray) -> None:
        self.ids = ids
        self.read_ids = 0

    def read(self, start: int, end: int) -> np.ndarray:
        self.read_ids += max(end - start, 0)
        return self.ids[start:end]

    def max_id(self) -> int:
        return int(self.ids.max()) if self.ids.size else -1


def window(trace: Trace, first_step: int, last_step: int) -> Trace:
    """The rows of ``trace`` logged in ``[first_step, last_step]``, as a trace of their own."""
    lo = int(np.searchsorted(trace.steps, first_step, side="left"))
    hi = int(np.searchsorted(trace.steps, last_step, side="right"))
    offsets = trace.offsets
    return Trace(
        trace.steps[lo:hi],
        trace.counts[lo:hi],
        trace.ids[offsets[lo] : offsets[hi]].copy(),
        trace.segments[lo:hi],
    )


def summaries_in_parts(trace: Trace, plan: EpochPlan, epochs_per_part: int) -> list[EpochSummary]:
    """What the map tasks compute: each part sees only its own window of the trace."""
    last = last_trace_step(trace)
    out: list[EpochSummary] = []
    for part in epoch_parts(plan, last, epochs_per_part * plan.samples_per_epoch):
        out.extend(summarize_epochs(window(trace, *step_window(plan, part)), plan, part, last))
    return out


def split_analysis(run: RunData, epochs_per_part: int) -> tuple[AnalysisReport, MemoryIds]:
    """The reduce: merged summaries, and a paged trace for what still reads ids."""
    assert run.trace is not None
    plan = plan_epochs(run)
    assert plan is not None
    summaries = summaries_in_parts(run.trace, plan, epochs_per_part)
    reader = MemoryIds(run.trace.ids)
    paged = Trace.paged(run.trace.steps, run.trace.counts, run.trace.segments, reader)
    paged_run = dataclasses.replace(run, trace=paged)
    return analyze_run(paged_run, coverage=MergedCoverage(plan, summaries, paged)), reader


def plain(report: AnalysisReport) -> str:
    def default(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            return value.tolist()
        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, (set, frozenset)):
            return sorted(value)
        raise TypeError(type(value))

    return json.dumps(dataclasses.asdict(report), default=default, sort_keys=True)


def assert_same_report(run: RunData, epochs_per_part: int) -> AnalysisReport:
    whole = analyze_run(run)
    split, _ = split_analysis(run, epochs_per_part)
    assert plain(split) == plain(whole)
    return whole


@pytest.mark.parametrize("epochs_per_part", EPOCHS_PER_PART)
@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("shuffle", [True, False])
def test_synthetic_runs_give_the_same_report(
    fault: str | None, shuffle: bool, epochs_per_part: int
) -> None:
    assert_same_report(build_run(fault=fault, shuffle=shuffle), epochs_per_part)


def test_the_faults_are_found_through_the_parts() -> None:
    """The equality above is not vacuous: the merged coverage carries drift and repeats."""
    fresh, _ = split_analysis(build_run(fault="fresh_seed"), 1)
    assert fresh.verdict == "fail"
    assert fresh.findings[0].evidence["repeated_ranges"]
    repeats, _ = split_analysis(build_run(fault="set_epoch_forgotten"), 1)
    (finding,) = [f for f in repeats.findings if f.severity != "info"]
    assert [r["epoch"] for r in finding.evidence["repeated_epochs"]] == [3, 4, 5]
    offset, _ = split_analysis(build_run(fault="offset_every_epoch", shuffle=False), 3)
    assert "re-applied its resume offset" in offset.findings[0].message
    assert offset.coverage is not None and offset.coverage["mean_seen"]


def stream_run(*, n: int, batch: int, epochs: int, resume: int, fresh_seed: bool) -> RunData:
    """A cyclic stream sampler (Megatron): epochs of ``n`` samples end in the middle of a step;
    the resume optionally restarts the stream with another seed."""
    rng = np.random.default_rng(11)
    stream = np.concatenate([rng.permutation(n) for _ in range(epochs)])
    if fresh_seed:
        other = np.random.default_rng(12)
        tail = np.concatenate([other.permutation(n) for _ in range(epochs)])
        stream[resume * batch :] = tail[: stream.size - resume * batch]
    steps = stream.size // batch
    ids = stream[: steps * batch].astype(np.int64)
    all_steps = np.arange(1, steps + 1, dtype=np.int64)
    segments = (all_steps > resume).astype(np.uint16)
    ckpt = f"iter_{resume:07d}"
    return RunData(
        segments=[
            SegmentInfo(0, 0, resume + 5, exit_reason="crash"),
            SegmentInfo(1, resume, steps, ckpt, ckpt, resume, sorted(COMPONENTS)),
        ],
        checkpoints=[CheckpointInfo(name=ckpt, step=resume, components=COMPONENTS)],
        trace=Trace(all_steps, np.full(steps, batch, dtype=np.int64), ids, segments),
        dataset_size=n,
        global_batch_size=batch,
    )


@pytest.mark.parametrize("epochs_per_part", EPOCHS_PER_PART)
@pytest.mark.parametrize("fresh_seed", [False, True])
def test_epochs_ending_mid_step_give_the_same_report(
    fresh_seed: bool, epochs_per_part: int
) -> None:
    run = stream_run(n=405, batch=8, epochs=7, resume=130, fresh_seed=fresh_seed)
    plan = plan_epochs(run)
    assert plan is not None and plan.stream and plan.samples_per_epoch % 8  # mid-step ends
    report = assert_same_report(run, epochs_per_part)
    assert report.verdict == ("fail" if fresh_seed else "pass")


def short_last_step_run(*, n: int, batch: int, epochs: int, resume: int) -> RunData:
    """A DataLoader without drop_last: every epoch ends on a short step; the resume starts its
    epoch over (the loader position was lost)."""
    rng = np.random.default_rng(5)
    batches: list[np.ndarray] = []
    for _ in range(epochs):
        order = rng.permutation(n)
        batches.extend(order[i : i + batch] for i in range(0, n, batch))
    spe = -(-n // batch)
    epoch = resume // spe
    replay_order = batches[epoch * spe : (epoch + 1) * spe]
    batches = batches[:resume] + replay_order + batches[(epoch + 1) * spe :]
    steps = len(batches)
    all_steps = np.arange(1, steps + 1, dtype=np.int64)
    segments = (all_steps > resume).astype(np.uint16)
    ckpt = f"step_{resume:06d}"
    return RunData(
        segments=[
            SegmentInfo(0, 0, resume, exit_reason="crash"),
            SegmentInfo(1, resume, steps, ckpt, ckpt, resume, sorted(COMPONENTS - {"dataloader"})),
        ],
        checkpoints=[CheckpointInfo(name=ckpt, step=resume, components=COMPONENTS)],
        trace=Trace(
            all_steps,
            np.array([b.size for b in batches], dtype=np.int64),
            np.concatenate(batches).astype(np.int64),
            segments,
        ),
        dataset_size=n,
        global_batch_size=batch,
    )


@pytest.mark.parametrize("epochs_per_part", EPOCHS_PER_PART)
def test_epochs_ending_on_a_short_step_give_the_same_report(epochs_per_part: int) -> None:
    run = short_last_step_run(n=405, batch=8, epochs=6, resume=120)
    plan = plan_epochs(run)
    assert plan is not None and not plan.stream
    report = assert_same_report(run, epochs_per_part)
    assert report.verdict == "fail"


def test_the_reduce_reads_only_a_small_part_of_the_ids() -> None:
    run = stream_run(n=20_000, batch=100, epochs=10, resume=1_100, fresh_seed=True)
    assert run.trace is not None
    report, reader = split_analysis(run, 1)
    assert report.verdict == "fail"
    # the plan's head (the first epoch and the step where an id repeats) and no whole epochs
    assert reader.read_ids < 0.15 * run.trace.ids.size


def test_summaries_must_cover_every_epoch_once() -> None:
    run = build_run(fault="exact")
    assert run.trace is not None
    plan = plan_epochs(run)
    assert plan is not None
    summaries = summaries_in_parts(run.trace, plan, 1)
    with pytest.raises(ValueError, match="exactly once"):
        MergedCoverage(plan, summaries[:-1], run.trace)
    with pytest.raises(ValueError, match="exactly once"):
        MergedCoverage(plan, [*summaries, summaries[0]], run.trace)


def test_parts_are_whole_epochs_of_about_the_asked_size() -> None:
    plan = EpochPlan(1000, 10, 1000, "trace")
    assert epoch_parts(plan, 1000, 2500) == [
        range(0, 2),
        range(2, 4),
        range(4, 6),
        range(6, 8),
        range(8, 10),
    ]
    assert epoch_parts(plan, 1000, 10) == [range(e, e + 1) for e in range(10)]
    assert epoch_parts(plan, 1000, 10**9) == [range(0, 10)]
    assert step_window(plan, range(2, 4)) == (201, 400)


def test_a_repeated_order_is_confirmed_reading_each_epoch_once() -> None:
    """Epochs 3-5 replay epoch 2's order: their first ORDER_HEAD ids agree, so the whole orders
    (longer than that) are compared, and epoch 2 is read once for all three."""
    n = 70_000
    run = build_run(fault="set_epoch_forgotten", n=n, batch=1_000, resume=150, crash=160, every=50)
    assert_same_report(run, 1)
    report, reader = split_analysis(run, 1)
    (finding,) = [f for f in report.findings if f.severity != "info"]
    assert [r["epoch"] for r in finding.evidence["repeated_epochs"]] == [3, 4, 5]
    whole_orders = 4 * n  # epochs 2, 3, 4 and 5
    assert whole_orders <= reader.read_ids < whole_orders + 20 * 1_000

"""Ground truth for one run, computed from what the run actually did, not from the fault name.

Data labels compare the authoritative sample trace (for each step, the ids of the last process
that ran it) with the designed trace, epoch by designed epoch:

- a designed epoch is intact when it read the designed multiset of ids, or, for a shuffled
  sampler and a complete epoch, the designed number of ids with no more repeats than the design
  (drop_last leaves a random few out; which few is not part of the design);
- ``order_repeat``: two complete designed epochs read the identical order where the design differs;
- ``data_drift``: some designed epoch is not intact;
- a deviation that is neither (an order change with intact coverage) is listed as benign.

A deviation is blamed on the latest resume before the first step whose ids differ.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from scripts.corpus.samplers import SamplerSpec, design_trace
from scripts.corpus.trainer import ResumeReport, RunContext


def epoch_chunks(spec: SamplerSpec, steps: list[list[int]]) -> list[list[int]]:
    """Split a per-step trace into designed epochs (by step for batch-aligned samplers, by
    sample position for the cyclic one whose batches run across epoch ends)."""
    if spec.cyclic:
        flat = [i for batch in steps for i in batch]
        return [flat[i : i + spec.usable] for i in range(0, len(flat), spec.usable)]
    spe = int(spec.steps_per_epoch)
    return [[i for batch in steps[e : e + spe] for i in batch] for e in range(0, len(steps), spe)]


def _intact(design: list[int], actual: list[int], shuffled: bool, full: bool) -> bool:
    if Counter(design) == Counter(actual):
        return True
    return full and shuffled and len(actual) == len(design) and len(set(actual)) >= len(set(design))


def data_verdict(
    spec: SamplerSpec, design: list[list[int]], actual: list[list[int]], resumes: list[ResumeReport]
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(suspect, benign): at most one of them; both None when the trace equals the design."""
    first = next(
        (s for s, (d, a) in enumerate(zip(design, actual, strict=True), 1) if d != a), None
    )
    if first is None:
        return None, None
    blamed = [r for r in resumes if r.at < first]
    if not blamed:
        raise AssertionError(f"the trace deviates at step {first} before any resume")
    resume = blamed[-1]
    want, got = epoch_chunks(spec, design), epoch_chunks(spec, actual)
    full = [len(d) == spec.usable for d in want]
    repeats = [
        (i, j)
        for j in range(len(want))
        for i in range(j)
        if full[i] and full[j] and got[i] == got[j] and want[i] != want[j]
    ]
    broken = [e for e in range(len(want)) if not _intact(want[e], got[e], spec.shuffle, full[e])]
    bug = resume.bugs.describe()
    if repeats:
        pairs = ", ".join(f"{i}={j}" for i, j in repeats[:6])
        detail = (
            f"designed epochs read identical orders ({pairs}) after the resume from"
            f" {resume.checkpoint}; per-epoch coverage kept ({bug})"
        )
        return {"at": resume.at, "kind": "order_repeat", "detail": detail}, None
    if broken:
        extra = sum(sum((Counter(got[e]) - Counter(want[e])).values()) for e in broken)
        missing = sum(sum((Counter(want[e]) - Counter(got[e])).values()) for e in broken)
        span = f"{broken[0]}" if len(broken) == 1 else f"{broken[0]}-{broken[-1]}"
        detail = (
            f"from step {first} the ids differ from the design; designed epoch(s) {span}:"
            f" {extra} ids read beyond the designed multiset, {missing} designed ids unseen"
            f" (resume from {resume.checkpoint}: {bug})"
        )
        return {"at": resume.at, "kind": "data_drift", "detail": detail}, None
    detail = f"order differs from step {first}, per-epoch coverage intact ({bug})"
    return None, {"at": resume.at, "detail": detail}


def state_suspects(report: ResumeReport) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    at, name = report.at, report.checkpoint
    if "optimizer" not in report.saved:
        detail = f"{name} has no optimizer state; AdamW moments restart from zero"
        out.append({"at": at, "kind": "incomplete_checkpoint", "detail": detail})
    elif "optimizer" not in report.restored:
        detail = f"optimizer state saved in {name} but not loaded; AdamW moments restart from zero"
        out.append({"at": at, "kind": "state_not_restored", "detail": detail})
    saved, now = report.lr_saved, report.lr_now
    if "scheduler" not in report.restored and abs(now - saved) > 0.01 * max(abs(saved), 1e-12):
        detail = f"LR schedule rebuilt from scratch at the resume (lr {saved:.4g} -> {now:.4g})"
        out.append({"at": at, "kind": "lr_discontinuity", "detail": detail})
    return out


def spike_ratio(losses: dict[int, float], step: int, window: int = 10) -> float:
    """Loss at ``step`` over the median of its logged neighbours."""
    around = sorted(
        losses[s] for s in range(step - window, step + window + 1) if s != step and s in losses
    )
    if step not in losses or not around:
        return float("nan")
    return round(losses[step] / max(around[len(around) // 2], 1e-12), 3)


def build_truth(ctx: RunContext, scenario: str) -> dict[str, Any]:
    cfg = ctx.config
    spec = cfg.sampler
    design = design_trace(spec, cfg.total_steps)
    actual = [ctx.trace[s] for s in range(1, cfg.total_steps + 1)]
    suspects: list[dict[str, Any]] = []
    for report in ctx.resumes:
        suspects += state_suspects(report)
    data, benign = data_verdict(spec, design, actual, ctx.resumes)
    if data is not None:
        suspects.append(data)
    suspects.sort(key=lambda s: s["at"])
    spe = spec.steps_per_epoch
    return {
        "scenario": scenario,
        "fault": ctx.plan.kind,
        "resumes": [r.at for r in ctx.resumes],
        "suspect_resumes": suspects,
        "checkpoint_spikes": sorted(ctx.stalls),
        "non_checkpoint_spikes": list(ctx.plan.bad_steps),
        "dataset_size": spec.dataset_size,
        "steps_per_epoch": int(spe) if float(spe).is_integer() else round(spe, 4),
        "total_steps": cfg.total_steps,
        "benign_deviations": [benign] if benign else [],
    }

"""The labelled corpus: valid run directories, and labels that hold by construction.

The designed data order is re-derived here with plain torch calls (not the generator's sampler
code) and compared with what the runs logged.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
import torch

from scripts.corpus.faults import FAULT_KINDS, ResumeBugs
from scripts.corpus.generate import Slot, generate_run
from scripts.corpus.labels import data_verdict, epoch_chunks
from scripts.corpus.samplers import SamplerSpec, design_trace, epoch_order
from scripts.corpus.trainer import ResumeReport

METRIC_FIELDS = {"step", "loss", "lr", "grad_norm", "epoch", "time"}
MANIFEST_FIELDS = {
    "step",
    "time_start",
    "time_end",
    "consumed_samples",
    "epoch",
    "consumed_in_epoch",
    "seed",
    "shuffle",
    "dataset_size",
    "global_batch_size",
    "components",
}
TRUTH_FIELDS = {
    "scenario",
    "fault",
    "resumes",
    "suspect_resumes",
    "checkpoint_spikes",
    "non_checkpoint_spikes",
    "dataset_size",
    "steps_per_epoch",
    "total_steps",
    "params",
}
DATA_KINDS = {"data_drift", "order_repeat"}
EXPECTED_KIND = {
    "optimizer_not_saved": "incomplete_checkpoint",
    "optimizer_not_loaded": "state_not_restored",
    "scheduler_reset": "lr_discontinuity",
    "set_epoch_forgotten": "order_repeat",
    "fresh_seed": "data_drift",
    "position_lost": "data_drift",
    "skip_factor": "data_drift",
    "offset_every_epoch": "data_drift",
    "epoch_off_by_one": "data_drift",
}


@pytest.fixture(scope="module")
def corpus(quick_corpus: list[Path]) -> dict[str, Path]:
    return {load(path / "truth.json")["fault"]: path for path in quick_corpus}


def load(path: Path) -> Any:
    return json.loads(path.read_text())


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def copies(run: Path) -> dict[int, list[list[int]]]:
    """Every logged copy of each step's sample ids, in file order."""
    out: dict[int, list[list[int]]] = defaultdict(list)
    for record in lines(run / "samples.jsonl"):
        out[record["step"]].append(record["sample_ids"])
    return out


def spec_of(truth: dict[str, Any]) -> SamplerSpec:
    sampler, params = truth["params"]["sampler"], truth["params"]
    return SamplerSpec(
        sampler["kind"],
        truth["dataset_size"],
        params["global_batch_size"],
        sampler["seed"],
        drop_last=sampler["drop_last"],
        world_size=sampler["world_size"],
        seed_mode=sampler.get("seed_mode", "epoch"),
    )


def authoritative(run: Path) -> list[list[int]]:
    """For each step, the ids of the last process that ran it."""
    last = {step: got[-1] for step, got in copies(run).items()}
    return [last[s] for s in sorted(last)]


def torch_epoch_order(sampler: dict[str, Any], n: int, epoch: int) -> list[int]:
    """The designed order, straight from the torch calls each framework makes."""
    kind, seed = sampler["kind"], sampler["seed"]
    if kind == "sequential":
        return list(range(n))
    if kind == "torch_distributed":
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
        padded = math.ceil(n / sampler["world_size"]) * sampler["world_size"]
        return order + order[: padded - n]
    if kind == "megatron_cyclic":
        key = epoch if sampler["seed_mode"] == "epoch" else seed + epoch
        return torch.randperm(n, generator=torch.Generator().manual_seed(key)).tolist()
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epoch):  # a full RandomSampler iteration draws twice (the 2nd sliced to [:0])
        torch.randperm(n, generator=generator)
        torch.randperm(n, generator=generator)
    return torch.randperm(n, generator=generator).tolist()


def torch_design(truth: dict[str, Any], steps: int) -> list[list[int]]:
    sampler, n = truth["params"]["sampler"], truth["dataset_size"]
    gbs = truth["params"]["global_batch_size"]
    if sampler["kind"] == "megatron_cyclic":
        stream: list[int] = []
        epoch = 0
        while len(stream) < steps * gbs:
            stream += torch_epoch_order(sampler, n, epoch)
            epoch += 1
        return [stream[i * gbs : (i + 1) * gbs] for i in range(steps)]
    out: list[list[int]] = []
    epoch = 0
    while len(out) < steps:
        order = torch_epoch_order(sampler, n, epoch)
        usable = len(order) - len(order) % gbs if sampler["drop_last"] else len(order)
        out += [order[i : min(i + gbs, usable)] for i in range(0, usable, gbs)]
        epoch += 1
    return out[:steps]


def test_quick_corpus_covers_every_fault(corpus: dict[str, Path]) -> None:
    assert set(corpus) == set(FAULT_KINDS)
    for fault, run in corpus.items():
        assert re.fullmatch(rf"\d\d_{fault}_(clusters|regression|chars)", run.name)
    samplers = Counter(load(r / "truth.json")["params"]["sampler"]["kind"] for r in corpus.values())
    assert len(samplers) == 4


def test_run_directories_are_valid(corpus: dict[str, Path]) -> None:
    for run in corpus.values():
        truth = load(run / "truth.json")
        assert set(truth) >= TRUTH_FIELDS
        files = truth["params"]["files"]
        assert (run / "events.jsonl").exists() == files["events"]
        assert (run / "samples.jsonl").exists() == files["samples"]
        assert (run / "config.json").exists() == files["config"]
        if files["sampler_declared"]:
            declared = load(run / "config.json")["sampler"]
            assert {"kind", "seed", "drop_last", "world_size"} <= set(declared)
        metrics = lines(run / "metrics.jsonl")
        assert metrics and all(set(m) >= METRIC_FIELDS for m in metrics)
        for name in ("metrics.jsonl", "events.jsonl", "evals.jsonl"):
            if (run / name).exists():
                times = [r["time"] for r in lines(run / name)]
                assert times == sorted(times), f"{run.name}/{name}: time goes back"
        for folder in sorted((run / "checkpoints").iterdir()):
            manifest = load(folder / "manifest.json")
            assert set(manifest) >= MANIFEST_FIELDS
            assert folder.name == f"step_{manifest['step']:06d}"
            assert manifest["time_start"] <= manifest["time_end"]
            assert all(c["bytes"] > 0 for c in manifest["components"].values())
            sampler = load(folder / "sampler.json")
            assert sampler["consumed_in_epoch"] == manifest["consumed_in_epoch"]
            assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "sampler.json"]
        if files["events"]:
            events = lines(run / "events.jsonl")
            starts = [e for e in events if e["event"] == "process_start"]
            assert len(starts) == len(truth["resumes"]) + 1
            assert "restored" not in starts[0] and starts[0]["resumed_from"] is None
            resumed = [int(s["resumed_from"].rsplit("_", 1)[1]) for s in starts[1:]]
            assert resumed == truth["resumes"]
            assert events[-1] == {**events[-1], "event": "process_exit", "reason": "finished"}


def test_epoch_quirk(corpus: dict[str, Path]) -> None:
    """Some runs log an epoch's last step with the next epoch's number, some do not."""
    seen = set()
    for run in corpus.values():
        truth = load(run / "truth.json")
        params, spe = truth["params"], truth["steps_per_epoch"]
        if params["log_every"] != 1 or params["sampler"]["kind"] == "megatron_cyclic":
            continue
        epochs = {m["step"]: m["epoch"] for m in lines(run / "metrics.jsonl")}
        assert epochs[spe - 1] == 0 and epochs[spe + 1] == 1
        assert epochs[spe] == int(params["epoch_after_advance"])
        seen.add(params["epoch_after_advance"])
    assert seen


def test_no_events_or_samples_only_where_allowed(corpus: dict[str, Path]) -> None:
    for fault, run in corpus.items():
        if not (run / "events.jsonl").exists():
            assert fault in ("exact", "fresh_seed")
        if not (run / "samples.jsonl").exists():
            assert fault in (
                "none",
                "optimizer_not_saved",
                "optimizer_not_loaded",
                "scheduler_reset",
            )


def test_logged_ids_follow_the_torch_design_until_the_first_resume(
    corpus: dict[str, Path],
) -> None:
    checked = 0
    for run in corpus.values():
        if not (run / "samples.jsonl").exists():
            continue
        truth = load(run / "truth.json")
        records = lines(run / "samples.jsonl")
        steps = [r["step"] for r in records]
        end = next((i for i in range(1, len(steps)) if steps[i] <= steps[i - 1]), len(steps))
        design = torch_design(truth, truth["total_steps"])
        stalls = {v["spike_step"]: v["missing_steps"] for v in truth["params"]["stalls"].values()}
        for record in records[:end]:
            step = record["step"]
            first = stalls[step][0] if step in stalls else step  # a stall logs all its batches
            expected = [i for s in range(first, step + 1) for i in design[s - 1]]
            assert record["sample_ids"] == expected, (run.name, step)
            checked += 1
    assert checked > 1000


def test_exact_resumes_replay_the_same_ids_and_losses(corpus: dict[str, Path]) -> None:
    for fault in ("exact_older", "double"):
        run = corpus[fault]
        truth = load(run / "truth.json")
        first_resume = truth["params"]["resume_details"][0]
        replayed = range(first_resume["at"] + 1, first_resume["crash_step"] + 1)
        assert len(replayed) > 0
        ids = copies(run)
        assert all(len(ids[s]) == 2 and ids[s][0] == ids[s][1] for s in replayed)
        losses: dict[int, list[float]] = defaultdict(list)
        for m in lines(run / "metrics.jsonl"):
            losses[m["step"]].append(m["loss"])
        # A logged loss averages the steps since the last log line: compare whole windows.
        every = truth["params"]["log_every"]
        compared = [s for s in replayed if s in losses and s - every >= first_resume["at"]]
        assert all(losses[s][0] == losses[s][1] for s in compared)
    preempt = load(corpus["preempt"] / "truth.json")
    detail = preempt["params"]["resume_details"][0]
    assert detail["crash_step"] == detail["at"] and not preempt["suspect_resumes"]
    assert max(Counter(r["step"] for r in lines(corpus["preempt"] / "samples.jsonl")).values()) == 1


def test_clean_runs_cover_each_designed_epoch_once(corpus: dict[str, Path]) -> None:
    for fault in ("none", "bad_batches", "stall_on_save"):
        run = corpus[fault]
        if not (run / "samples.jsonl").exists():
            continue
        truth = load(run / "truth.json")
        spec, sampler = spec_of(truth), truth["params"]["sampler"]
        stream = [i for batch in authoritative(run) for i in batch]
        epochs = len(stream) // spec.usable
        assert epochs >= 3
        for epoch in range(epochs):
            chunk = stream[epoch * spec.usable : (epoch + 1) * spec.usable]
            order = torch_epoch_order(sampler, spec.dataset_size, epoch)
            assert Counter(chunk) == Counter(order[: spec.usable]), (run.name, epoch)
            if spec.world_size == 1:
                assert len(set(chunk)) == len(chunk)  # each sample once, minus the dropped tail


def test_fresh_seed_resumed_epoch_repeats_samples(corpus: dict[str, Path]) -> None:
    run = corpus["fresh_seed"]
    truth = load(run / "truth.json")
    spec = spec_of(truth)
    resume = truth["params"]["resume_details"][0]
    assert "dataloader" not in resume["restored"]
    assert resume["loader_now"]["seed"] != resume["loader_saved"]["seed"]
    chunks = epoch_chunks(spec, authoritative(run))
    resumed_epoch = resume["at"] * spec.global_batch_size // spec.usable
    if not spec.cyclic:
        resumed_epoch = resume["at"] // int(truth["steps_per_epoch"])
    assert max(Counter(chunks[resumed_epoch]).values()) > 1
    assert truth["suspect_resumes"][0]["kind"] == "data_drift"


def test_set_epoch_forgotten_repeats_one_permutation(corpus: dict[str, Path]) -> None:
    run = corpus["set_epoch_forgotten"]
    truth = load(run / "truth.json")
    spec = spec_of(truth)
    chunks = [c for c in epoch_chunks(spec, authoritative(run)) if len(c) == spec.usable]
    after = truth["resumes"][0] // int(truth["steps_per_epoch"])
    repeats = [
        (e, f) for f in range(after + 1, len(chunks)) for e in range(f) if chunks[e] == chunks[f]
    ]
    assert repeats
    for e, f in repeats:  # the design differs: the run read one permutation twice
        assert epoch_order(spec, e) != epoch_order(spec, f)


def test_labels_match_what_the_resume_code_did(corpus: dict[str, Path]) -> None:
    for fault, run in corpus.items():
        truth = load(run / "truth.json")
        kinds = [s["kind"] for s in truth["suspect_resumes"]]
        if fault in EXPECTED_KIND:
            assert kinds == [EXPECTED_KIND[fault]], run.name
            assert truth["suspect_resumes"][0]["at"] == truth["resumes"][-1]
        elif fault == "double":
            assert len(truth["resumes"]) == 2 and kinds and set(kinds) <= DATA_KINDS
            assert truth["suspect_resumes"][0]["at"] == truth["resumes"][1]
        else:
            assert kinds == [], run.name
    for fault, missing in (("scheduler_reset", "scheduler"), ("fresh_seed", "dataloader")):
        if (corpus[fault] / "events.jsonl").exists():
            starts = [e for e in lines(corpus[fault] / "events.jsonl") if "restored" in e]
            assert missing not in starts[0]["restored"] and "model" in starts[0]["restored"]
    saved = load(corpus["optimizer_not_saved"] / "truth.json")["params"]["resume_details"][0]
    assert "optimizer" not in saved["restored"]
    for folder in (corpus["optimizer_not_saved"] / "checkpoints").iterdir():
        assert "optimizer" not in load(folder / "manifest.json")["components"]
    not_loaded = load(corpus["optimizer_not_loaded"] / "truth.json")["params"]
    assert "optimizer" not in not_loaded["resume_details"][0]["restored"]
    reset = load(corpus["scheduler_reset"] / "truth.json")["params"]["resume_details"][0]
    assert "scheduler" not in reset["restored"] and reset["lr_now"] != reset["lr_saved"]
    older = load(corpus["exact_older"] / "truth.json")["params"]["resume_details"][0]
    assert older["skipped_checkpoints"]


def test_spikes(corpus: dict[str, Path]) -> None:
    stall = load(corpus["stall_on_save"] / "truth.json")
    logged = {m["step"] for m in lines(corpus["stall_on_save"] / "metrics.jsonl")}
    slow = [s["step"] for s in stall["params"]["plan"]["slow_saves"]]
    assert stall["checkpoint_spikes"] == slow
    for save in slow:
        first, last = stall["params"]["stalls"][str(save)]["missing_steps"]
        assert save in logged and not logged & set(range(first, last + 1))
        assert stall["params"]["stall_loss_ratio"][str(save)] > 3
    bad = load(corpus["bad_batches"] / "truth.json")
    every = bad["params"]["checkpoint_every"]
    for step in bad["non_checkpoint_spikes"]:
        assert min(step % every, every - step % every) >= 8


def test_sampler_orders_match_torch() -> None:
    for world in (1, 2, 4):
        spec = SamplerSpec("torch_distributed", 103, 16, seed=11, world_size=world)
        for epoch in range(3):
            expected = torch_epoch_order(spec.config(), 103, epoch)
            assert list(epoch_order(spec, epoch)) == expected
    random = SamplerSpec("torch_random", 50, 8, seed=5)
    sampler = torch.utils.data.RandomSampler(range(50), generator=torch.Generator().manual_seed(5))
    assert [list(epoch_order(random, e)) for e in range(3)] == [list(sampler) for _ in range(3)]
    cyclic = SamplerSpec("megatron_cyclic", 96, 40, seed=9, drop_last=False, seed_mode="epoch")
    stream = [i for batch in design_trace(cyclic, 12) for i in batch]
    expected = [i for e in range(5) for i in torch_epoch_order(cyclic.config(), 96, e)]
    assert stream == expected[: len(stream)]


def test_a_fault_that_changes_nothing_is_not_suspect(tmp_path: Path) -> None:
    slot = Slot(0, "skip_factor", "regression", "torch_random", benign=True, quick=True)
    path, truth = generate_run(slot, tmp_path, seed=1)
    detail = truth["params"]["resume_details"][0]
    assert detail["loader_saved"]["consumed_in_epoch"] == 0
    assert truth["resumes"] and truth["suspect_resumes"] == []
    assert path.name == "00_skip_factor_regression"
    # The label compares coverage, not orders: another dropped tail is not drift.
    spec = SamplerSpec("torch_distributed", 20, 8, seed=0)
    design = design_trace(spec, 4)
    other = design_trace(SamplerSpec("torch_distributed", 20, 8, seed=99), 4)
    report = ResumeReport(0, "step_000000", 1, [], [], [], {}, {}, 0.0, 0.0, ResumeBugs())
    suspect, benign = data_verdict(spec, design, [*design[:2], *other[2:]], [report])
    assert suspect is None and benign is not None

"""The demo trainer writes real, labelled run directories with the faults each scenario names."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.demo import SCENARIOS, generate_all, generate_run

START = 1_700_000_000.0
BATCH = 32
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
ALL_COMPONENTS = {"model", "optimizer", "scheduler", "rng", "dataloader"}
EXPECTED_SUSPECTS = {
    "clean": [],
    "exact_resume": [],
    "preempt_exact": [],
    "megatron_offset": [(300, "data_drift")],
    "fresh_seed": [(500, "data_drift")],
    "optimizer_not_saved": [(600, "incomplete_checkpoint")],
    "optimizer_not_loaded": [(200, "state_not_restored")],
    "scheduler_reset": [(300, "lr_discontinuity")],
    "stall_on_save": [],
    "natural_spikes": [],
    "double_resume": [(600, "data_drift")],
    "set_epoch_forgotten": [(200, "order_repeat")],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo")
    paths = generate_all(out, start_time=START)
    assert paths == [out / name for name in SCENARIOS]
    return out


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def truth(runs: Path, name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((runs / name / "truth.json").read_text())
    return doc


def manifests(run: Path) -> list[dict[str, Any]]:
    docs = [json.loads(p.read_text()) for p in sorted(run.glob("checkpoints/*/manifest.json"))]
    return docs


def starts(run: Path) -> list[dict[str, Any]]:
    return [e for e in lines(run / "events.jsonl") if e["event"] == "process_start"]


def final_ids(run: Path) -> dict[int, list[int]]:
    """Sample ids of each step as the finished run trained on them (a replay wins)."""
    return {row["step"]: row["sample_ids"] for row in lines(run / "samples.jsonl")}


def epoch_ids(ids_by_step: dict[int, list[int]], epoch: int, steps_per_epoch: int) -> list[int]:
    steps = range(epoch * steps_per_epoch + 1, (epoch + 1) * steps_per_epoch + 1)
    return [i for step in steps for i in ids_by_step.get(step, [])]


def test_scenario_names() -> None:
    assert list(SCENARIOS) == list(EXPECTED_SUSPECTS)
    assert all(isinstance(text, str) and text for text in SCENARIOS.values())


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_scenario_writes_valid_files(runs: Path, name: str) -> None:
    run = runs / name
    info = truth(runs, name)
    size, steps_per_epoch = info["dataset_size"], info["steps_per_epoch"]
    assert 1800 <= size <= 2000
    assert steps_per_epoch == size // BATCH
    assert info["total_steps"] == 15 * steps_per_epoch
    assert info["scenario"] == name

    metrics = lines(run / "metrics.jsonl")
    samples = lines(run / "samples.jsonl")
    for row in metrics:
        assert set(row) == METRIC_FIELDS
        assert type(row["step"]) is int and type(row["epoch"]) is int
        assert all(np.isfinite(row[k]) for k in ("loss", "lr", "grad_norm", "time"))
        assert row["loss"] >= 0 and row["lr"] > 0 and row["grad_norm"] >= 0
    assert [row["step"] for row in samples] == [row["step"] for row in metrics]
    for row in samples:
        assert set(row) == {"step", "sample_ids"}
        ids = row["sample_ids"]
        assert len(ids) == BATCH and len(set(ids)) == BATCH
        assert all(type(i) is int and 0 <= i < size for i in ids)
    assert metrics[-1]["step"] == info["total_steps"]

    evals = lines(run / "evals.jsonl")
    assert evals
    for row in evals:
        assert set(row) == {"step", "time"} | {f"acc_class_{c}" for c in range(10)}
        assert row["step"] % 20 == 0
        assert all(0.0 <= row[f"acc_class_{c}"] <= 1.0 for c in range(10))

    events = lines(run / "events.jsonl")
    kinds = {"process_start", "process_exit", "checkpoint_save_start", "checkpoint_save_end"}
    assert {e["event"] for e in events} <= kinds
    assert events[0]["event"] == "process_start" and events[-1]["event"] == "process_exit"
    assert events[-1]["reason"] == "finished" and events[-1]["step"] == info["total_steps"]
    for event in events:
        if event["event"] == "process_start":
            if event["resumed_from"] is None:
                assert event["step"] == 0 and "restored" not in event
            else:
                assert event["resumed_from"] == f"checkpoints/step_{event['step']:06d}"
                assert set(event["restored"]) <= ALL_COMPONENTS
        if event["event"] == "process_exit":
            assert event["reason"] in ("crash", "finished")
    resumes = [e["step"] for e in events if e["event"] == "process_start"][1:]
    assert resumes == info["resumes"]

    for file in ("metrics.jsonl", "evals.jsonl", "events.jsonl"):
        times = [row["time"] for row in lines(run / file)]
        assert times == sorted(times), f"{file} times go back"
        assert times[0] >= START

    docs = manifests(run)
    assert [d["step"] for d in docs] == list(range(100, info["total_steps"] + 1, 100))
    for doc in docs:
        folder = run / "checkpoints" / f"step_{doc['step']:06d}"
        assert set(doc) == MANIFEST_FIELDS
        assert doc["time_start"] <= doc["time_end"]
        assert doc["dataset_size"] == size and doc["global_batch_size"] == BATCH
        assert doc["consumed_samples"] == doc["step"] * BATCH
        assert set(doc["components"]) <= ALL_COMPONENTS
        for component in doc["components"].values():
            assert type(component["bytes"]) is int and component["bytes"] > 0
        assert doc["components"]["model"]["bytes"] > 4 * 32 * 64  # real weights, not a stub
        loader = json.loads((folder / "sampler.json").read_text())
        assert (
            len((folder / "sampler.json").read_bytes()) == doc["components"]["dataloader"]["bytes"]
        )
        assert loader == {k: doc[k] for k in ("seed", "shuffle", "epoch", "consumed_in_epoch")}

    suspects = [(s["at"], s["kind"]) for s in info["suspect_resumes"]]
    assert suspects == EXPECTED_SUSPECTS[name]
    assert all(isinstance(s["detail"], str) and s["detail"] for s in info["suspect_resumes"])
    assert {s["at"] for s in info["suspect_resumes"]} <= set(info["resumes"])


@pytest.mark.parametrize("name", ["clean", "fresh_seed", "stall_on_save"])
def test_runwatch_reader_accepts_the_run(runs: Path, name: str) -> None:
    from app.ingest.aliases import AliasTable
    from app.ingest.context import ReadContext
    from app.ingest.errors import Warnings
    from app.ingest.run_directory import RunDirectoryReader
    from app.ingest.source import DirectoryTree, Limits

    warnings = Warnings()
    limits = Limits(
        max_source_bytes=1 << 30,
        max_members=1000,
        max_compression_ratio=100.0,
        max_line_bytes=1 << 20,
    )
    tree = DirectoryTree(runs / name, warnings, limits)
    ctx = ReadContext(tree, AliasTable(), warnings, max_line_bytes=1 << 20)
    parsed = RunDirectoryReader(ctx).read()
    assert warnings.items == []
    assert parsed.metrics.num_rows == len(lines(runs / name / "metrics.jsonl"))
    assert parsed.dataset_size == truth(runs, name)["dataset_size"]
    assert parsed.global_batch_size == BATCH
    assert all(c.data_state is not None for c in parsed.checkpoints)


def test_clean_run_covers_every_epoch_exactly_once(runs: Path) -> None:
    info = truth(runs, "clean")
    size, spe = info["dataset_size"], info["steps_per_epoch"]
    ids = final_ids(runs / "clean")
    orders = []
    for epoch in range(15):
        seen = epoch_ids(ids, epoch, spe)
        assert len(seen) == len(set(seen)) == size - size % BATCH
        orders.append(seen)
    assert all(a != b for a, b in itertools.pairwise(orders))  # reshuffled each epoch
    assert len(starts(runs / "clean")) == 1


def test_epoch_field_is_read_after_the_sampler_advanced(runs: Path) -> None:
    spe = truth(runs, "clean")["steps_per_epoch"]
    epochs = {row["step"]: row["epoch"] for row in lines(runs / "clean" / "metrics.jsonl")}
    assert epochs[1] == 0
    assert epochs[spe - 1] == 0
    assert epochs[spe] == 1  # an epoch's last step already carries the next epoch
    assert epochs[spe + 1] == 1
    assert epochs[3 * spe] == 3 and epochs[3 * spe - 1] == 2


def test_clean_run_learns(runs: Path) -> None:
    metrics = lines(runs / "clean" / "metrics.jsonl")
    first = np.mean([row["loss"] for row in metrics[:20]])
    last = np.mean([row["loss"] for row in metrics[-50:]])
    assert last < first / 4
    final = lines(runs / "clean" / "evals.jsonl")[-1]
    assert np.mean([final[f"acc_class_{c}"] for c in range(10)]) > 0.7
    lrs = [row["lr"] for row in metrics]
    peak = int(np.argmax(lrs))
    assert 0 < peak < 100 and lrs[-1] < lrs[peak] / 5  # warm-up, then cosine decay


def test_exact_resume_replays_the_same_batches(runs: Path) -> None:
    run = runs / "exact_resume"
    assert [e["step"] for e in starts(run)] == [0, 400]
    assert set(starts(run)[1]["restored"]) == ALL_COMPONENTS
    samples = lines(run / "samples.jsonl")
    metrics = lines(run / "metrics.jsonl")
    back = next(i for i in range(1, len(samples)) if samples[i]["step"] < samples[i - 1]["step"])
    assert samples[back - 1]["step"] == 437 and samples[back]["step"] == 401
    first = samples[back - 37 : back]
    replay = samples[back : back + 37]
    assert [r["step"] for r in first] == [r["step"] for r in replay] == list(range(401, 438))
    assert [r["sample_ids"] for r in first] == [r["sample_ids"] for r in replay]
    # Model, optimizer and RNG were restored too, so the replayed losses match.
    assert [r["loss"] for r in metrics[back - 37 : back]] == [
        r["loss"] for r in metrics[back : back + 37]
    ]
    clean = final_ids(runs / "clean")
    assert final_ids(run) == clean  # the finished run saw exactly the clean run's data


def test_preempt_stops_right_after_a_save(runs: Path) -> None:
    events = lines(runs / "preempt_exact" / "events.jsonl")
    exit_at = next(i for i, e in enumerate(events) if e["event"] == "process_exit")
    assert events[exit_at - 1] == {
        **events[exit_at - 1],
        "event": "checkpoint_save_end",
        "step": 500,
    }
    assert events[exit_at]["step"] == 500
    assert events[exit_at + 1]["resumed_from"] == "checkpoints/step_000500"
    assert events[exit_at + 1]["time"] - events[exit_at]["time"] >= 590
    assert final_ids(runs / "preempt_exact") == final_ids(runs / "clean")


def test_fresh_seed_resumed_epoch_repeats_and_misses_ids(runs: Path) -> None:
    run = runs / "fresh_seed"
    info = truth(runs, "fresh_seed")
    size, spe = info["dataset_size"], info["steps_per_epoch"]
    start = starts(run)[1]
    assert start["step"] == 500 and "dataloader" not in start["restored"]
    assert {"model", "optimizer", "scheduler", "rng"} <= set(start["restored"])
    epoch = 500 // spe
    seen = epoch_ids(final_ids(run), epoch, spe)
    assert len(seen) == size - size % BATCH
    assert len(set(seen)) < len(seen)  # repeated ids
    assert len(set(range(size)) - set(seen)) > size % BATCH  # more missing than drop_last
    later = {d["seed"] for d in manifests(run) if d["step"] > 500}
    assert later and 1234 not in later  # the new loader runs on a new seed


def test_megatron_offset_skips_the_epoch_head(runs: Path) -> None:
    run = runs / "megatron_offset"
    docs = manifests(run)
    assert all(d["shuffle"] is False for d in docs)
    offset = next(d for d in docs if d["step"] == 300)["consumed_in_epoch"]
    assert offset > 0
    ids = final_ids(run)
    ordered = [ids[s] for s in sorted(ids)]
    epoch_heads = [s for s in sorted(ids)[1:] if ids[s][0] < ids[s - 1][0]]
    before = [s for s in epoch_heads if s <= 300]
    after = [s for s in epoch_heads if s > 300]
    assert before and after
    assert all(ids[s][0] == 0 for s in before)  # sequential: epochs used to start at id 0
    assert all(ids[s][0] == offset for s in after)  # ...and now start at the resumed offset
    never_again = {i for batch in ordered[after[0] - 1 :] for i in batch}
    assert never_again.isdisjoint(range(offset))


def test_set_epoch_forgotten_repeats_one_permutation(runs: Path) -> None:
    run = runs / "set_epoch_forgotten"
    spe = truth(runs, "set_epoch_forgotten")["steps_per_epoch"]
    assert starts(run)[1]["step"] == 200
    ids = final_ids(run)
    resumed_epoch = 200 // spe
    later = [epoch_ids(ids, e, spe) for e in range(resumed_epoch + 1, 15)]
    assert len(later) > 5 and all(order == later[0] for order in later)
    before = [epoch_ids(ids, e, spe) for e in range(resumed_epoch + 1)]
    assert all(a != b for a, b in itertools.pairwise(before))


def test_stall_on_save_skips_steps_then_spikes(runs: Path) -> None:
    run = runs / "stall_on_save"
    info = truth(runs, "stall_on_save")
    assert info["checkpoint_spikes"] == [200, 400, 600] and info["resumes"] == []
    assert len(starts(run)) == 1
    metrics = lines(run / "metrics.jsonl")
    steps = [row["step"] for row in metrics]
    gaps = [(a, b) for a, b in itertools.pairwise(steps) if b != a + 1]
    assert [a for a, _ in gaps] == [200, 400, 600]
    assert all(21 <= b - a <= 28 for a, b in gaps)
    median_loss = np.median([row["loss"] for row in metrics])
    median_norm = np.median([row["grad_norm"] for row in metrics])
    by_step = {row["step"]: row for row in metrics}
    for _, after in gaps:
        assert (
            by_step[after]["loss"] > 5 * median_loss
            or by_step[after]["grad_norm"] > 3 * median_norm
        )
    events = {(e["event"], e["step"]): e["time"] for e in lines(run / "events.jsonl")}
    for step in (200, 400, 600):
        took = events[("checkpoint_save_end", step)] - events[("checkpoint_save_start", step)]
        assert 20 < took < 30
    assert events[("checkpoint_save_end", 300)] - events[("checkpoint_save_start", 300)] < 5
    # The stalled batches were consumed: the next epoch still starts on schedule.
    spe = info["steps_per_epoch"]
    assert sorted(epoch_ids(final_ids(run), 4, spe)) == sorted(
        epoch_ids(final_ids(runs / "clean"), 4, spe)
    )


def test_scheduler_reset_restarts_warmup(runs: Path) -> None:
    run = runs / "scheduler_reset"
    assert "scheduler" not in starts(run)[1]["restored"]
    metrics = lines(run / "metrics.jsonl")
    back = next(i for i in range(1, len(metrics)) if metrics[i]["step"] < metrics[i - 1]["step"])
    before, after = metrics[back - 1], metrics[back]
    assert after["step"] == 301
    assert after["lr"] == pytest.approx(metrics[0]["lr"])  # the first warm-up LR again
    assert after["lr"] < before["lr"] / 10
    assert metrics[back + 1]["lr"] > after["lr"]  # climbing again


def test_optimizer_faults(runs: Path) -> None:
    not_saved = runs / "optimizer_not_saved"
    assert all("optimizer" not in d["components"] for d in manifests(not_saved))
    assert "optimizer" not in starts(not_saved)[1]["restored"]
    not_loaded = runs / "optimizer_not_loaded"
    assert all("optimizer" in d["components"] for d in manifests(not_loaded))
    assert "optimizer" not in starts(not_loaded)[1]["restored"]
    assert starts(not_loaded)[1]["step"] == 200
    # Only the optimizer was dropped: the data order is the clean run's.
    assert final_ids(not_loaded) == final_ids(runs / "clean")


def test_double_resume_labels_only_the_second(runs: Path) -> None:
    run = runs / "double_resume"
    first, second = starts(run)[1:]
    assert (first["step"], second["step"]) == (200, 600)
    assert set(first["restored"]) == ALL_COMPONENTS
    assert "dataloader" not in second["restored"]


def test_natural_spikes_are_not_at_checkpoints(runs: Path) -> None:
    info = truth(runs, "natural_spikes")
    spikes = info["non_checkpoint_spikes"]
    assert len(spikes) == 4 and info["checkpoint_spikes"] == [] and info["resumes"] == []
    loss = {row["step"]: row["loss"] for row in lines(runs / "natural_spikes" / "metrics.jsonl")}
    for step in spikes:
        assert step % 100 > 10
        assert loss[step] > 5 * max(loss[step - 1], loss[step + 1])


def test_same_seed_same_run(runs: Path, tmp_path: Path) -> None:
    again = generate_run("exact_resume", tmp_path, start_time=START + 5)
    for file in ("samples.jsonl", "metrics.jsonl"):
        old = [
            {k: v for k, v in r.items() if k != "time"} for r in lines(runs / "exact_resume" / file)
        ]
        new = [{k: v for k, v in r.items() if k != "time"} for r in lines(again / file)]
        assert old == new
    assert json.loads((again / "truth.json").read_text()) == truth(runs, "exact_resume")
    other = generate_run("clean", tmp_path / "other", seed=99, start_time=START)
    assert final_ids(other) != final_ids(runs / "clean")


def test_rejects_unknown_scenario_and_too_few_epochs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown scenario"):
        generate_run("nope", tmp_path)
    with pytest.raises(ValueError):
        generate_run("exact_resume", tmp_path, epochs=5)
    short = generate_run("clean", tmp_path, epochs=2, start_time=START)
    assert truth(tmp_path, "clean")["total_steps"] == lines(short / "metrics.jsonl")[-1]["step"]


def test_regenerating_replaces_the_old_run(tmp_path: Path) -> None:
    generate_run("exact_resume", tmp_path, start_time=START)
    run = generate_run("clean", tmp_path, start_time=START)
    assert len(starts(run)) == 1
    run = generate_run("clean", tmp_path, start_time=START)
    assert len(starts(run)) == 1
    assert len(lines(run / "metrics.jsonl")) == truth(tmp_path, "clean")["total_steps"]

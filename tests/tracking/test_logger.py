"""RunLogger writes the run-directory format Runwatch reads, and survives kill -9 and resume."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from app.ingest.aliases import AliasTable
from app.ingest.context import ReadContext
from app.ingest.errors import Warnings
from app.ingest.formats import read_source
from app.ingest.records import ParsedRun
from app.ingest.source import DirectoryTree, Limits
from app.tracking import RunLogger

SCRIPT = Path(__file__).with_name("train_script.py")
LIMITS = Limits(
    max_source_bytes=1 << 30, max_members=1000, max_compression_ratio=100, max_line_bytes=1 << 20
)


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def read_run(root: Path) -> tuple[ParsedRun, list[str]]:
    """What Runwatch's own reader makes of the directory."""
    warnings = Warnings()
    tree = DirectoryTree(root, warnings, LIMITS)
    ctx = ReadContext(tree, AliasTable(), warnings, max_line_bytes=1 << 20)
    return read_source(ctx), [str(w) for w in warnings.summary()]


def test_records_have_the_documented_shape(tmp_path: Path) -> None:
    with RunLogger(tmp_path) as log:
        log.start()
        log.metrics(1, loss=np.float32(2.5), lr=torch.tensor(0.1), grad_norm=1, epoch=0)
        log.samples(1, np.array([3, 1, 2]))
        log.samples(2, torch.tensor([7, 8]))
        log.eval(1, loss=1.5, acc=np.int64(3))
    [metric] = lines(tmp_path / "metrics.jsonl")
    assert list(metric) == ["step", "loss", "lr", "grad_norm", "epoch", "time"]
    assert metric["loss"] == 2.5 and metric["lr"] == pytest.approx(0.1) and metric["epoch"] == 0
    assert lines(tmp_path / "samples.jsonl") == [
        {"step": 1, "sample_ids": [3, 1, 2]},
        {"step": 2, "sample_ids": [7, 8]},
    ]
    [evaluation] = lines(tmp_path / "evals.jsonl")
    assert evaluation["acc"] == 3 and isinstance(evaluation["time"], float)
    start, finish = lines(tmp_path / "events.jsonl")
    assert start["event"] == "process_start" and start["resumed_from"] is None
    assert start["restored"] is None
    assert finish["event"] == "process_exit" and finish["reason"] == "finished"
    assert finish["step"] == 2  # the last step logged


def test_bad_values_raise_and_write_nothing(tmp_path: Path) -> None:
    log = RunLogger(tmp_path)
    with pytest.raises(TypeError, match="'loss' must be a number"):
        log.metrics(1, loss="high")
    with pytest.raises(TypeError, match="'ok' must be a number"):
        log.metrics(1, ok=True)
    with pytest.raises(TypeError, match="single number"):
        log.metrics(1, loss=torch.ones(3))
    with pytest.raises(TypeError, match="flat sequence of integers"):
        log.samples(1, [1.5, 2.0])
    with pytest.raises(ValueError, match="negative"):
        log.samples(1, [3, -1])
    with pytest.raises(ValueError, match="negative"):
        log.metrics(-1, loss=1.0)
    log.close()
    assert sorted(os.listdir(tmp_path)) == []  # no empty files for the reader to trip on


def test_checkpoint_manifest_measures_components(tmp_path: Path) -> None:
    run = tmp_path / "run"
    log = RunLogger(run)
    folder = run / "checkpoints" / "step_000010"
    folder.mkdir(parents=True)
    (folder / "model.pt").write_bytes(b"m" * 100)
    elsewhere = tmp_path / "store" / "optim"
    elsewhere.mkdir(parents=True)
    (elsewhere / "a.bin").write_bytes(b"o" * 30)
    (elsewhere / "b.bin").write_bytes(b"o" * 12)
    state = {"seed": 7, "shuffle": True, "epoch": 2, "consumed_in_epoch": 64}
    with log.saving(10):
        log.checkpoint(
            "step_000010",
            10,
            components={
                "model": "model.pt",
                "optimizer": elsewhere,
                "scheduler": {"file": "sched.json", "bytes": 5},
            },
            consumed_samples=320,
            dataset_size=1000,
            global_batch_size=32,
            data_state=state,
        )
    log.close()
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["components"] == {
        "model": {"file": "model.pt", "bytes": 100},
        "optimizer": {"file": str(elsewhere), "bytes": 42},
        "scheduler": {"file": "sched.json", "bytes": 5},
        "dataloader": {"file": "sampler.json", "bytes": (folder / "sampler.json").stat().st_size},
    }
    assert (manifest["epoch"], manifest["consumed_in_epoch"], manifest["seed"]) == (2, 64, 7)
    assert manifest["shuffle"] is True and manifest["consumed_samples"] == 320
    assert json.loads((folder / "sampler.json").read_text()) == state
    start, end = lines(run / "events.jsonl")
    assert (start["event"], end["event"]) == ("checkpoint_save_start", "checkpoint_save_end")
    assert manifest["time_start"] == start["time"] <= manifest["time_end"] <= end["time"]
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "model.pt", "sampler.json"]


def test_checkpoint_refuses_missing_files_and_bad_names(tmp_path: Path) -> None:
    log = RunLogger(tmp_path)
    with pytest.raises(FileNotFoundError, match="'model'"):
        log.checkpoint("c1", 1, components={"model": "nope.pt"})
    with pytest.raises(ValueError, match="plain folder name"):
        log.checkpoint("../c1", 1, components={})
    log.close()


def test_exception_in_with_block_records_error_exit(tmp_path: Path) -> None:
    with pytest.raises(KeyError), RunLogger(tmp_path) as log:
        log.start()
        log.metrics(3, loss=1.0)
        raise KeyError("boom")
    last = lines(tmp_path / "events.jsonl")[-1]
    assert (last["event"], last["step"], last["reason"]) == ("process_exit", 3, "error: KeyError")
    with pytest.raises(RuntimeError, match="closed"):
        log.metrics(4, loss=1.0)


def test_exit_is_written_once(tmp_path: Path) -> None:
    with RunLogger(tmp_path) as log:
        log.exit(5, reason="preempted")
    events = lines(tmp_path / "events.jsonl")
    assert [(e["step"], e["reason"]) for e in events] == [(5, "preempted")]


def test_partial_last_line_from_a_kill_is_cut_before_appending(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"step":1,"loss":1.0}\n{"step":2,"lo')
    with RunLogger(tmp_path) as log:
        log.metrics(2, loss=0.5)
    assert [row["step"] for row in lines(tmp_path / "metrics.jsonl")] == [1, 2]


def test_config_keeps_the_first_process_values(tmp_path: Path) -> None:
    RunLogger(tmp_path, config={"lr": 0.1, "seed": 1}).close()
    log = RunLogger(tmp_path, config={"lr": 0.5, "batch": 8})
    assert log.config == {"lr": 0.1, "seed": 1, "batch": 8}
    log.close()
    assert json.loads((tmp_path / "config.json").read_text()) == log.config


def test_threads_never_interleave_lines(tmp_path: Path) -> None:
    log = RunLogger(tmp_path)

    def work(offset: int) -> None:
        for i in range(300):
            log.samples(offset + i, list(range(50)))

    threads = [threading.Thread(target=work, args=(k * 1000,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    log.close()
    rows = lines(tmp_path / "samples.jsonl")
    assert len(rows) == 1200 and all(len(row["sample_ids"]) == 50 for row in rows)


def _close_in_child(log: RunLogger) -> None:
    log.close()


def test_close_in_a_forked_child_leaves_the_parent_logging(tmp_path: Path) -> None:
    """A forked child (a DataLoader worker) holds copies of the parent's unflushed buffers:
    closing them there would write those lines twice."""
    log = RunLogger(tmp_path, flush_every=10)
    log.metrics(1, loss=1.0)
    child = multiprocessing.get_context("fork").Process(target=_close_in_child, args=(log,))
    child.start()
    child.join(timeout=30)
    assert child.exitcode == 0
    log.metrics(2, loss=0.5)
    log.close()
    assert [row["step"] for row in lines(tmp_path / "metrics.jsonl")] == [1, 2]


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_killed_run_resumes_from_its_last_checkpoint(tmp_path: Path) -> None:
    run = tmp_path / "run"
    first = run_script("--run-dir", str(run), "--steps", "40", "--kill-at", "27")
    assert first.returncode == -9, first.stderr
    events = lines(run / "events.jsonl")
    assert [e["event"] for e in events][-1] == "checkpoint_save_end"  # no exit: a crash
    # A kill in the middle of a write leaves half a line; the resumed process must cope.
    with (run / "samples.jsonl").open("a") as handle:
        handle.write('{"step": 28, "sample_ids": [1, 2')

    second = run_script(
        "--run-dir", str(run), "--steps", "40", "--resume", "latest", "--num-workers", "2"
    )
    assert second.returncode == 0, second.stderr

    starts = [e for e in lines(run / "events.jsonl") if e["event"] == "process_start"]
    assert [(s["step"], s["resumed_from"]) for s in starts] == [
        (0, None),
        (20, "checkpoints/step_000020"),
    ]
    assert starts[1]["restored"] == ["model", "optimizer", "scheduler", "rng", "dataloader"]
    assert lines(run / "events.jsonl")[-1]["reason"] == "finished"
    steps = [row["step"] for row in lines(run / "metrics.jsonl")]
    assert steps == [*range(1, 28), *range(21, 41)]  # 21..27 replayed after the kill
    samples = lines(run / "samples.jsonl")
    assert [row["step"] for row in samples] == steps
    # The resume continued the data order exactly: the replayed steps saw the same ids.
    first_pass = {row["step"]: row["sample_ids"] for row in samples[:27]}
    assert all(row["sample_ids"] == first_pass[row["step"]] for row in samples[27:34])
    epoch0 = sorted(i for row in samples[:12] for i in row["sample_ids"])
    assert len(epoch0) == len(set(epoch0)) == 192  # 12 steps x 16 distinct ids
    manifests = sorted(p.parent.name for p in (run / "checkpoints").glob("*/manifest.json"))
    assert manifests == ["step_000010", "step_000020", "step_000030", "step_000040"]

    parsed, warnings = read_run(run)
    assert warnings == []
    assert parsed.metrics.steps.tolist() == steps
    assert [c.name for c in parsed.checkpoints] == manifests
    assert parsed.checkpoints[1].data_state == {
        "seed": 1234,
        "shuffle": True,
        "epoch": 1,
        "consumed_in_epoch": 128,
    }
    assert [e.kind for e in parsed.events].count("process_start") == 2
    assert parsed.config["sampler"]["kind"] == "torch_distributed"

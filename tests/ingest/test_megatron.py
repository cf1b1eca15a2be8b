"""Megatron cannot run here (it needs GPUs), so these logs are written in its exact line shape
(field widths of Megatron-LM's ``training_log``) with each quirk real logs show."""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from app.ingest.aliases import AliasTable
from app.ingest.context import ReadContext
from app.ingest.errors import Warnings
from app.ingest.megatron import reader
from app.ingest.records import ParsedRun
from app.ingest.source import DirectoryTree, Limits

LIMITS = Limits(
    max_source_bytes=1 << 30, max_members=1000, max_compression_ratio=100, max_line_bytes=1 << 20
)
PREAMBLE = "".join(f"  {name} {'.' * 30} {value}\n" for name, value in [("seed", 1234)] * 60)


def _read(root: Path) -> tuple[ParsedRun, list[str]]:
    warnings = Warnings()
    tree = DirectoryTree(root, warnings, LIMITS)
    found = reader.detect(tree)
    assert found is not None, "not detected as a Megatron run"
    ctx = ReadContext(tree, AliasTable(), warnings, max_line_bytes=1 << 20)
    return reader.read(ctx, found), warnings.summary()


def _iteration(
    it: int,
    *,
    total: int = 1000,
    batch: int = 4,
    loss: float | None = 2.5,
    scale: float | None = 16384.0,
    grad: str | None = "1.250",
    ms: float | None = 1623.5,
    seconds: float | None = None,
    skipped: int = 0,
) -> str:
    """One Megatron iteration line (fields it lacks are left out, as Megatron does)."""
    fields = [f" iteration {it:8d}/{total:8d}", f" consumed samples: {it * batch:12d}"]
    if ms is not None:
        fields.append(f" elapsed time per iteration (ms): {ms:.1f}")
    if seconds is not None:
        fields.append(f" elapsed time per iteration (s): {seconds:.2f}")
    fields += [" learning rate: 1.471E-04", f" global batch size: {batch:5d}"]
    if loss is not None:
        fields.append(f" lm loss: {loss:.6E}")
    if scale is not None:
        fields.append(f" loss scale: {scale:.1f}")
    if grad is not None:
        fields.append(f" grad norm: {grad}")
    fields += [f" number of skipped iterations: {skipped:3d}", " number of nan iterations:   0"]
    return " |".join(fields) + " |"


def test_fields_units_prefixes_stamps_and_glued_lines(tmp_path: Path) -> None:
    lines = [
        PREAMBLE.rstrip("\n"),
        _iteration(10, loss=None, grad=None, skipped=10),  # every step skipped: no loss/grad
        f"[2025-05-09 06:11:17]{_iteration(20, grad='nan')}",
        f"[default7]:{_iteration(30, scale=None, ms=None, seconds=106.46)}",  # bf16, in s
        # two ranks printed the same iteration into one line; a memory report glued after it
        f"[default0]:{_iteration(40)}[default7]:{_iteration(40)}[Rank 3] memory (MB) | a: 1.0",
        "time (ms) | forward-compute: 144.40 | backward-compute: 398.55",
        "-" * 40,
        " validation loss at iteration 40 | lm loss value: 2.400000E+00 | lm loss PPL: 11.02 | ",
        "-" * 40,
    ]
    (tmp_path / "train.log").write_text("\n".join(lines) + "\n")
    parsed, warnings = _read(tmp_path)
    metrics = parsed.metrics
    assert metrics.steps.tolist() == [10, 20, 30, 40]
    assert metrics.times[1] == 1746771077.0  # 2025-05-09 06:11:17 UTC
    rows, loss = metrics.columns["loss"]
    assert rows.tolist() == [1, 2, 3] and loss.tolist() == [2.5, 2.5, 2.5]
    assert metrics.source_keys["loss"] == "lm loss"
    rows, grad = metrics.columns["grad_norm"]
    assert rows.tolist() == [1, 2, 3] and np.isnan(grad[0])  # "nan" kept as NaN
    assert metrics.columns["loss_scale"][0].tolist() == [0, 1, 3]
    assert metrics.columns["iteration_time"][1].tolist() == pytest.approx(
        [1.6235, 1.6235, 106.46, 1.6235]
    )
    assert metrics.columns["consumed_samples"][1].tolist() == [40, 80, 120, 160]
    assert "a" not in metrics.columns  # the glued memory report is not a metric of iteration 40
    assert parsed.evals is not None
    assert parsed.evals.steps.tolist() == [40]
    assert parsed.evals.columns["eval/loss"][1].tolist() == [2.4]
    assert parsed.evals.columns["eval/loss_ppl"][1].tolist() == [11.02]
    assert parsed.global_batch_size == 4
    assert parsed.events == []  # nothing marks a process: the service infers segments
    assert warnings == []


def test_restart_with_save_and_load_lines(tmp_path: Path) -> None:
    first = [
        "WARNING: could not find the metadata file /ckpt/latest_checkpointed_iteration.txt ",
        "    will not load any checkpoints and will start from random",
        _iteration(10),
        _iteration(20),
        "saving checkpoint at iteration      20 to /ckpt",
        "  successfully saved checkpoint at iteration      20 to /ckpt",
        _iteration(30, loss=9.0),
        "srun: Job step aborted: Waiting up to 62 seconds for job step to finish.",
        "Main process received SIGTERM, exiting",
        "Main process received SIGTERM, exiting",
    ]
    second = [
        " loading checkpoint from /ckpt at iteration 20",
        " successfully loaded checkpoint from /ckpt [ t 1/1, p 1/1 ] at iteration 20",
        _iteration(30, loss=2.0),
        _iteration(40),
        "[after training is done] datetime: 2024-01-02 03:04:05 ",
    ]
    (tmp_path / "train.log").write_text("\n".join(first + second) + "\n")
    parsed, _ = _read(tmp_path)
    assert parsed.metrics.steps.tolist() == [10, 20, 30, 30, 40]  # iteration 30 logged again
    lifecycle = [
        (e.kind, e.step, e.payload)
        for e in parsed.events
        if e.kind in ("process_start", "process_exit")
    ]
    assert lifecycle == [
        ("process_start", 0, {"resumed_from": None}),
        ("process_exit", 30, {"reason": "killed"}),
        ("process_start", 20, {"resumed_from": "/ckpt/iter_0000020"}),
        ("process_exit", 40, {"reason": "finished"}),
    ]
    saves = [(e.kind, e.step) for e in parsed.events if e.kind.startswith("checkpoint")]
    assert saves == [("checkpoint_save_start", 20), ("checkpoint_save_end", 20)]
    assert parsed.events[-1].time == 1704164645.0
    (saved,) = parsed.checkpoints  # the save the log reports, though its folder is not here
    assert (saved.name, saved.step, saved.consumed_samples) == ("iter_0000020", 20, 80)


def test_save_after_the_last_logged_iteration_then_exit(tmp_path: Path) -> None:
    lines = [
        _iteration(33230, total=311541, batch=1024),
        _iteration(33240, total=311541, batch=1024, grad="0.000"),
        "time (ms)",
        "saving checkpoint at iteration   33241 to /scratch/checkpoints",
        "  successfully saved checkpoint at iteration   33241 to /scratch/checkpoints",
        "time (ms) | save-checkpoint: 57514.53",
        "[exiting program after 1190.0357275923093 minutes] datetime: 2021-08-08 01:00:51",
    ]
    (tmp_path / "slurm-682842.out").write_text(PREAMBLE + "\n".join(lines) + "\n")
    parsed, _ = _read(tmp_path)
    (saved,) = parsed.checkpoints
    assert saved.step == 33241
    assert saved.consumed_samples == 33241 * 1024  # the line before plus one iteration
    exit_event = parsed.events[-1]
    assert (exit_event.kind, exit_event.step) == ("process_exit", 33241)
    assert exit_event.payload == {"reason": "time_limit"}
    assert parsed.events[0].kind == "process_start" and parsed.events[0].step is None


def test_one_log_per_job_starts_a_process_per_file(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "slurm-9.out").write_text(
        "\n".join([_iteration(10), _iteration(20), _iteration(30)]) + "\n"
    )
    (tmp_path / "logs" / "slurm-10.out").write_text(
        "\n".join([_iteration(30), _iteration(40)]) + "\n"
    )
    ckpt = tmp_path / "ckpt" / "iter_0000020" / "mp_rank_00"
    ckpt.mkdir(parents=True)
    (ckpt / "model_optim_rng.pt").write_bytes(b"truncated")
    (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").write_text("20")
    parsed, _ = _read(tmp_path)
    assert parsed.metrics.steps.tolist() == [10, 20, 30, 30, 40]  # slurm-9 before slurm-10
    starts = [(e.step, e.payload["resumed_from"]) for e in parsed.events]
    assert starts == [(0, None), (20, "iter_0000020")]
    assert parsed.config["megatron"]["latest_checkpointed_iteration"] == 20


def _model_optim_rng(path: Path, **args: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "args": argparse.Namespace(**args),
        "checkpoint_version": 3.0,
        "iteration": 10,
        "model": {"language_model": {"weight": torch.zeros(4, 4)}},
        "rng_state": [
            {
                "random_rng_state": random.getstate(),
                "np_rng_state": np.random.get_state(),
                "torch_rng_state": torch.get_rng_state(),
            }
        ],
    }
    torch.save(state, path)


def test_checkpoint_tree_components_and_saved_state(tmp_path: Path) -> None:
    save = tmp_path / "checkpoints"
    legacy = save / "iter_0000010"
    for rank in ("mp_rank_00", "mp_rank_01"):
        _model_optim_rng(
            legacy / rank / "model_optim_rng.pt",
            consumed_train_samples=40,
            global_batch_size=4,
            seed=1234,
            no_save_optim=None,
            no_save_rng=True,
        )
    dist = save / "iter_0000020"
    dist.mkdir()
    for name in ("__0_0.distcp", "__1_0.distcp", ".metadata"):
        (dist / name).write_bytes(b"\0" * 64)
    (dist / "metadata.json").write_text('{"sharded_backend": "torch_dist"}')
    torch.save(
        {"args": argparse.Namespace(global_batch_size=4, seed=1234), "iteration": 20},
        dist / "common.pt",
    )
    torch.save(
        {"step": torch.tensor(20), "consumed_train_samples": torch.tensor(80)},
        dist / "train_state.pt",
    )
    (dist / "train_dataloader_dprank000.pt").write_bytes(b"\0" * 8)
    (save / "latest_checkpointed_iteration.txt").write_text("20\n")
    parsed, warnings = _read(tmp_path)  # a checkpoint tree with no log
    first, second = parsed.checkpoints
    assert (first.name, first.step, first.consumed_samples, first.seed) == (
        "iter_0000010",
        10,
        40,
        1234,
    )
    assert sorted(first.components) == ["model", "optimizer", "scheduler"]  # --no-save-rng
    model = first.components["model"]
    assert model.file == "mp_rank_00/model_optim_rng.pt"
    sizes = [
        (legacy / r / "model_optim_rng.pt").stat().st_size for r in ("mp_rank_00", "mp_rank_01")
    ]
    assert model.bytes == sum(sizes)
    assert (second.step, second.consumed_samples, second.global_batch_size) == (20, 80, 4)
    assert sorted(second.components) == ["dataloader", "model", "optimizer", "rng", "scheduler"]
    assert second.components["model"].bytes == 128  # two shards of 64 bytes
    assert second.components["optimizer"].bytes is None  # in the same shards as the model
    assert parsed.metrics.num_rows == 0
    assert parsed.global_batch_size == 4
    assert parsed.config["megatron"]["latest_checkpointed_iteration"] == 20
    assert any("no Megatron training log" in w for w in warnings)


def test_detection(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("iteration counts and consumed samples: nothing to see\n")
    assert reader.detect(DirectoryTree(run, Warnings(), LIMITS)) is None
    (run / "job.out").write_text(PREAMBLE * 3 + _iteration(10) + "\n")  # past the first KB
    assert reader.detect(DirectoryTree(run, Warnings(), LIMITS)) == ""

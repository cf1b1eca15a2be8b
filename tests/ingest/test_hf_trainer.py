from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from torch import nn
from transformers import PreTrainedConfig, PreTrainedModel, Trainer, TrainingArguments

from app.ingest.aliases import AliasTable
from app.ingest.context import ReadContext
from app.ingest.errors import IngestError, Warnings
from app.ingest.hf_trainer import reader
from app.ingest.records import ParsedRun
from app.ingest.source import DirectoryTree, Limits, SingleFileTree

LIMITS = Limits(
    max_source_bytes=1 << 30, max_members=1000, max_compression_ratio=100, max_line_bytes=1 << 20
)


class TinyConfig(PreTrainedConfig):
    model_type = "runwatch_tiny_mlp"

    def __init__(self, width: int = 8, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.width = width


class TinyMLP(PreTrainedModel):
    config_class = TinyConfig

    def __init__(self, config: TinyConfig) -> None:
        super().__init__(config)
        self.net = nn.Sequential(nn.Linear(4, config.width), nn.ReLU(), nn.Linear(config.width, 1))
        self.post_init()

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> dict:
        out = self.net(x).squeeze(-1)
        loss = nn.functional.mse_loss(out, labels) if labels is not None else None
        return {"loss": loss, "logits": out}


class Points(torch.utils.data.Dataset):
    def __init__(self, size: int, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.x = torch.randn(size, 4, generator=generator)
        self.y = self.x.sum(dim=1)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[i], "labels": self.y[i]}


def _train(
    output: Path, max_steps: int, *, resume: Path | None = None, seed: int = 7, eval_steps: int = 5
) -> Trainer:
    """40 samples, batches of 4 with 2 accumulation steps: 5 optimizer steps an epoch."""
    args = TrainingArguments(
        output_dir=str(output),
        max_steps=max_steps,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        learning_rate=1e-2,
        logging_steps=1,
        save_steps=5,
        eval_strategy="steps",
        eval_steps=eval_steps,
        seed=seed,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=TinyMLP(TinyConfig()), args=args, train_dataset=Points(40), eval_dataset=Points(8, 1)
    )
    trainer.train(resume_from_checkpoint=None if resume is None else str(resume))
    return trainer


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A run to step 12 (checkpoints 5, 10, 12), kept as it is; then the same output folder
    resumed from checkpoint-5 with max_steps 20 (it rewrites checkpoint-10, adds 15 and 20 and
    leaves the first process's checkpoint-12), with the final state saved; and a different run."""
    base = tmp_path_factory.mktemp("hf")
    resumed = base / "resumed" / "out"
    _train(resumed, 12)
    shutil.copytree(resumed, base / "single")
    _train(resumed, 20, resume=resumed / "checkpoint-5").save_state()
    _train(base / "other", 5, seed=8, eval_steps=2)
    return {"single": base / "single", "resumed": base / "resumed", "other": base / "other"}


def _read(path: Path) -> tuple[ParsedRun, list[str]]:
    warnings = Warnings()
    if path.is_dir():
        tree: DirectoryTree | SingleFileTree = DirectoryTree(path, warnings, LIMITS)
    else:
        tree = SingleFileTree(path, path.name)
    root = reader.detect(tree)
    assert root is not None, "not detected as a Trainer output folder"
    ctx = ReadContext(tree, AliasTable(), warnings, max_line_bytes=1 << 20)
    return reader.read(ctx, root), warnings.summary()


def _history(path: Path) -> list[dict]:
    return json.loads(path.read_text())["log_history"]


def test_uninterrupted_run(runs: dict[str, Path]) -> None:
    parsed, warnings = _read(runs["single"])
    history = _history(runs["single"] / "checkpoint-12" / "trainer_state.json")
    losses = [e["loss"] for e in history if "loss" in e]
    assert parsed.metrics.steps.tolist() == list(range(1, 13))
    assert parsed.metrics.columns["loss"][1].tolist() == losses
    assert parsed.metrics.source_keys["lr"] == "learning_rate"
    assert {"epoch", "grad_norm"} <= set(parsed.metrics.columns)
    assert parsed.evals is not None and parsed.evals.steps.tolist() == [5, 10, 12]  # and at the end
    assert "eval/loss" in parsed.evals.columns
    assert parsed.events == []
    names = [(c.name, c.step, c.epoch, c.consumed_samples, c.seed) for c in parsed.checkpoints]
    assert names == [
        ("checkpoint-5", 5, 1, 40, 7),  # 5 steps x 4 samples x 2 accumulation steps
        ("checkpoint-10", 10, 2, 80, 7),
        ("checkpoint-12", 12, 2, 96, 7),
    ]
    components = parsed.checkpoints[0].components
    assert sorted(components) == ["model", "optimizer", "rng", "scheduler"]
    optimizer = runs["single"] / "checkpoint-5" / "optimizer.pt"
    assert components["optimizer"].file == "optimizer.pt"
    assert components["optimizer"].bytes == optimizer.stat().st_size
    assert parsed.global_batch_size == 8
    assert warnings == []


def test_resume_from_an_older_checkpoint_keeps_both_processes(runs: dict[str, Path]) -> None:
    parsed, warnings = _read(runs["resumed"])
    out = runs["resumed"] / "out"
    first = [e for e in _history(out / "checkpoint-12" / "trainer_state.json") if "loss" in e]
    second = [e for e in _history(out / "trainer_state.json") if "loss" in e]
    steps = parsed.metrics.steps.tolist()
    assert steps == list(range(1, 13)) + list(range(6, 21))  # steps 6-12 logged twice
    losses = parsed.metrics.columns["loss"][1].tolist()
    assert losses[:12] == [e["loss"] for e in first]
    assert losses[12:] == [e["loss"] for e in second[5:]]
    lifecycle = [(e.kind, e.step, e.payload.get("resumed_from")) for e in parsed.events]
    assert lifecycle == [
        ("process_start", 0, None),
        ("process_exit", 12, None),
        ("process_start", 5, "checkpoint-5"),
    ]
    assert [c.name for c in parsed.checkpoints] == [
        "checkpoint-5",
        "checkpoint-10",
        "checkpoint-12",
        "checkpoint-15",
        "checkpoint-20",
    ]
    summary = parsed.config["hf_summary"]
    assert summary["step"] == 20 and summary["train_runtime"] > 0
    assert parsed.config["hf_trainer"]["global_step"] == 20
    assert any("a resume from checkpoint-5" in w for w in warnings)


def test_a_checkpoint_folder_alone(runs: dict[str, Path]) -> None:
    parsed, _ = _read(runs["single"] / "checkpoint-10")
    assert parsed.metrics.steps.tolist() == list(range(1, 11))
    (record,) = parsed.checkpoints
    assert (record.name, record.step, record.consumed_samples) == ("checkpoint-10", 10, 80)


def test_checkpoints_of_two_runs_side_by_side_are_refused(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    mixed = tmp_path / "outputs"
    shutil.copytree(runs["single"], mixed)
    shutil.copytree(runs["other"] / "checkpoint-5", mixed / "checkpoint-4")
    with pytest.raises(IngestError) as raised:
        _read(mixed)
    message = str(raised.value)
    assert "checkpoint-4 and checkpoint-12" in message and "eval_steps" in message

    same_settings = tmp_path / "same"
    shutil.copytree(runs["single"], same_settings)
    state = same_settings / "checkpoint-5" / "trainer_state.json"
    doc = json.loads(state.read_text())
    doc["log_history"][0]["loss"] += 1.0  # another seed: differs from the first entry on
    state.write_text(json.dumps(doc))
    with pytest.raises(IngestError, match="differ from the first entry"):
        _read(same_settings)


def _state(history: list[dict], **top: object) -> dict:
    step = max((e["step"] for e in history if "step" in e), default=0)
    return {"global_step": step, "max_steps": step, "log_history": history, **top}


def test_quirks_of_real_files(tmp_path: Path) -> None:
    history = [
        {"epoch": 0.5, "lr": 1e-3, "loss": 2.0, "grad_norm": math.nan, "step": 1},
        {"epoch": 1.0, "lr": 9e-4, "loss": 1.5, "grad_norm": math.inf, "step": 2},
        {"epoch": 1.0, "rewards/chosen": 0.25, "step": 2},
        {"epoch": 1.0, "eval_loss": 1.4, "eval_rouge-1": 33.0, "step": 2},
        {"epoch": 1.0, "eval_g1_loss": 1.3, "step": 2},
        {"predict_loss": 1.2, "predict_runtime": 3.0},
        {"epoch": 1.0, "step": 2, "train_runtime": 10.0, "train_loss": 1.75, "total_flos": 0.0},
    ]
    text = json.dumps(_state(history, num_train_epochs=9223372036854775807), indent=2)
    path = tmp_path / "someone__repo__trainer_state.json"
    path.write_bytes(text.replace("\n", "\r\n").encode())  # bare NaN/Infinity, CRLF
    parsed, warnings = _read(path)
    metrics = parsed.metrics
    assert metrics.steps.tolist() == [1, 2]
    assert metrics.source_keys["lr"] == "lr"
    grad = metrics.columns["grad_norm"][1]
    assert math.isnan(grad[0]) and grad[1] == math.inf
    assert metrics.columns["rewards/chosen"][0].tolist() == [1]  # joined to step 2's row
    assert parsed.evals is not None and parsed.evals.steps.tolist() == [2]
    assert sorted(parsed.evals.columns) == [
        "eval/g1_loss",
        "eval/loss",
        "eval/rouge-1",
    ]
    assert parsed.config["hf_trainer"]["num_train_epochs"] == 9223372036854775807
    assert parsed.config["hf_summary"]["train_loss"] == 1.75
    assert any("1 log_history entries without a 'step'" in w for w in warnings)
    assert any("non-finite value(s) of 'grad_norm'" in w for w in warnings)


def test_git_lfs_pointer_is_refused(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(runs["single"], out)
    pointer = "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a\nsize 9436\n"
    (out / "checkpoint-5" / "trainer_state.json").write_text(pointer)
    with pytest.raises(IngestError) as raised:
        _read(tmp_path)
    assert raised.value.file == "out/checkpoint-5/trainer_state.json"
    assert "a Git LFS pointer, not the file" in str(raised.value)


def test_empty_log_history(tmp_path: Path) -> None:
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"global_step": 3, "epoch": 3.0, "log_history": []}))
    parsed, warnings = _read(path)
    assert parsed.metrics.num_rows == 0 and parsed.evals is None
    assert any("no training entries" in w for w in warnings)


def test_epoch_going_back_marks_a_resume_that_restarted_the_data(tmp_path: Path) -> None:
    """A streaming run resumed without skipping data: the step rises, the epoch restarts."""
    history = [
        {"epoch": e, "loss": 3.0 - s / 100, "learning_rate": 1e-4, "step": s}
        for s, e in [(10, 0.1), (20, 0.2), (30, 0.3), (40, 0.0), (50, 0.1), (60, 0.2)]
    ]
    out = tmp_path / "out"
    for step, entries in ((30, history[:3]), (60, history)):
        folder = out / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text(json.dumps(_state(entries, epoch=0.3)))
    parsed, warnings = _read(tmp_path)
    assert parsed.metrics.steps.tolist() == [10, 20, 30, 40, 50, 60]
    lifecycle = [(e.kind, e.step, e.payload.get("resumed_from")) for e in parsed.events]
    assert lifecycle == [
        ("process_start", 0, None),
        ("process_exit", 30, None),
        ("process_start", 30, "checkpoint-30"),
    ]
    assert "epoch went back from 0.3 to 0.0 at step 40" in parsed.events[-1].payload["evidence"]
    assert any("restarted the epoch" in w for w in warnings)


def test_two_output_folders_are_refused(tmp_path: Path) -> None:
    for run in ("run_a", "run_b"):
        folder = tmp_path / run / "checkpoint-10"
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text(json.dumps(_state([])))
    tree = DirectoryTree(tmp_path, Warnings(), LIMITS)
    with pytest.raises(IngestError, match="several Trainer output folders"):
        reader.detect(tree)

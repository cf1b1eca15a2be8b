"""Real Hugging Face and Lightning trainers crash, resume, and leave a run directory behind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader
from transformers import Trainer, TrainerCallback, TrainingArguments

from app.analysis.samplers import SamplerDesign
from app.ingest.aliases import AliasTable
from app.ingest.context import ReadContext
from app.ingest.errors import Warnings
from app.ingest.formats import read_source
from app.ingest.source import DirectoryTree, Limits
from app.tracking import SampleIdDataset
from app.tracking import hf as rw_hf
from app.tracking import lightning as rw_lightning

SIZE = 40
LIMITS = Limits(
    max_source_bytes=1 << 30, max_members=1000, max_compression_ratio=100, max_line_bytes=1 << 20
)


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def events(run: Path, kind: str) -> list[dict[str, Any]]:
    return [e for e in lines(run / "events.jsonl") if e["event"] == kind]


def reader_warnings(run: Path) -> list[str]:
    warnings = Warnings()
    ctx = ReadContext(DirectoryTree(run, warnings, LIMITS), AliasTable(), warnings, 1 << 20)
    read_source(ctx)
    return [str(w) for w in warnings.summary()]


class Rows:
    """A tiny classification set of dict rows (with a text column the model does not take)."""

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(SIZE, 4, generator=generator)
        self.y = (self.x[:, 0] > 0).long()

    def __len__(self) -> int:
        return SIZE

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"x": self.x[index], "labels": self.y[index], "text": f"row {index}"}


class CrashAt(TrainerCallback, L.Callback):
    """Raises once optimizer step ``step`` is logged, like a process dying mid-run."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.step:
            raise RuntimeError("simulated crash")

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        if trainer.global_step == self.step:
            raise RuntimeError("simulated crash")


# -- Hugging Face ------------------------------------------------------------------------------


class HFModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.linear(x)
        return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}


def hf_trainer(out: Path, callback: rw_hf.RunwatchCallback, *extra: Any) -> Trainer:
    args = TrainingArguments(
        output_dir=str(out / "hf"),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        max_steps=20,
        save_steps=5,
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=10,
        report_to="none",
        use_cpu=True,
        seed=7,
        disable_tqdm=True,
    )
    return Trainer(
        model=HFModel(),
        args=args,
        train_dataset=callback.track(Rows()),
        eval_dataset=Rows(),
        callbacks=[callback, *extra],
    )


def test_hf_trainer_crash_and_resume(tmp_path: Path) -> None:
    run = tmp_path / "run"
    first = rw_hf.RunwatchCallback(run, project="hf", name="tiny")
    with pytest.raises(RuntimeError, match="simulated crash"):
        hf_trainer(tmp_path, first, CrashAt(13)).train()
    first.close()  # the Trainer has no exception hook: like a dead process, no exit is written
    hf_trainer(tmp_path, rw_hf.RunwatchCallback(run)).train(resume_from_checkpoint=True)

    starts = events(run, "process_start")
    assert [(s["step"], s["resumed_from"], s["restored"]) for s in starts] == [
        (0, None, None),
        (10, "checkpoints/checkpoint-10", ["dataloader", "model", "optimizer", "rng", "scheduler"]),
    ]
    assert [(e["step"], e["reason"]) for e in events(run, "process_exit")] == [(20, "finished")]
    names = ["checkpoint-5", "checkpoint-10", "checkpoint-15", "checkpoint-20"]
    manifests = [json.loads((run / "checkpoints" / n / "manifest.json").read_text()) for n in names]
    assert [m["step"] for m in manifests] == [5, 10, 15, 20]
    assert [m["consumed_samples"] for m in manifests] == [40, 80, 120, 160]
    assert all(m["components"]["optimizer"]["bytes"] > 0 for m in manifests)
    assert sorted(manifests[1]["components"]) == starts[1]["restored"]
    assert manifests[1]["time_start"] <= manifests[1]["time_end"]

    metrics = lines(run / "metrics.jsonl")
    steps = [row["step"] for row in metrics]
    assert steps == [*range(1, 14), *range(11, 21)]  # the resume replays 11..13
    assert all({"loss", "lr", "grad_norm", "epoch"} <= set(row) for row in metrics)
    assert [row["step"] for row in lines(run / "evals.jsonl")] == [10, 20]

    # Each step's ids are the Trainer's real order: accelerate's seeded sampler, which is the
    # torch_distributed design declared in config.json; the resume continued it exactly.
    config = json.loads((run / "config.json").read_text())
    assert config["sampler"] == {"kind": "torch_distributed", "seed": 7, "drop_last": False}
    assert (config["dataset_size"], config["global_batch_size"]) == (SIZE, 8)
    design = SamplerDesign("torch_distributed", SIZE, seed=7)
    samples = lines(run / "samples.jsonl")
    assert [row["step"] for row in samples] == steps
    for row in samples:
        epoch, index = divmod(row["step"] - 1, 5)
        assert row["sample_ids"] == design.epoch_order(epoch)[index * 8 : index * 8 + 8].tolist()
    assert reader_warnings(run) == []


# -- Lightning ---------------------------------------------------------------------------------


class LitModel(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def training_step(self, batch: dict[str, Any], index: int) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.linear(batch["x"]), batch["labels"])

    def validation_step(self, batch: dict[str, Any], index: int) -> None:
        loss = torch.nn.functional.cross_entropy(self.linear(batch["x"]), batch["labels"])
        self.log("val_loss", loss, batch_size=len(batch["x"]))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def lit_fit(out: Path, callback: rw_lightning.RunwatchCallback, *extra: Any, **fit: Any) -> None:
    trainer = L.Trainer(
        max_steps=20,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accumulate_grad_batches=2,
        val_check_interval=10,
        limit_val_batches=2,
        callbacks=[
            ModelCheckpoint(dirpath=out / "ckpt", every_n_train_steps=5, save_top_k=-1),
            callback,
            *extra,
        ],
    )
    dataset = SampleIdDataset(Rows(), key="sample_id")
    train = DataLoader(dataset, batch_size=4, shuffle=True)
    trainer.fit(LitModel(), train, DataLoader(Rows(), batch_size=8), **fit)


def test_lightning_trainer_crash_and_resume(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with pytest.raises(RuntimeError, match="simulated crash"):
        lit_fit(tmp_path, rw_lightning.RunwatchCallback(run), CrashAt(13))
    checkpoint = tmp_path / "ckpt" / "epoch=1-step=10.ckpt"
    lit_fit(tmp_path, rw_lightning.RunwatchCallback(run), ckpt_path=str(checkpoint))

    starts = events(run, "process_start")
    assert [(s["step"], s["resumed_from"], s["restored"]) for s in starts] == [
        (0, None, None),
        (10, "checkpoints/epoch=1-step=10", ["model", "optimizer", "scheduler"]),
    ]
    exits = events(run, "process_exit")
    assert [(e["step"], e["reason"]) for e in exits] == [
        (13, "error: RuntimeError"),
        (20, "finished"),
    ]
    manifest = json.loads((run / "checkpoints" / "epoch=1-step=10" / "manifest.json").read_text())
    assert manifest["step"] == 10 and manifest["consumed_samples"] == 80
    assert manifest["components"]["model"]["file"] == "epoch=1-step=10.ckpt"
    assert sorted(manifest["components"]) == ["model", "optimizer", "scheduler"]
    saved = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert {"epoch=0-step=5", "epoch=2-step=15", "epoch=3-step=20"} <= set(saved)

    metrics = lines(run / "metrics.jsonl")
    steps = [row["step"] for row in metrics]
    assert steps == [*range(1, 14), *range(11, 21)]
    # StepLR(step_size=4, gamma=0.5) per optimizer step; the resume restored the scheduler.
    assert [row["lr"] for row in metrics[10:16]] == [0.025, 0.025, 0.0125, 0.025, 0.025, 0.0125]
    assert all(row["grad_norm"] > 0 and row["loss"] > 0 for row in metrics)
    assert [row["step"] for row in lines(run / "evals.jsonl")] == [5, 10, 15, 20]

    samples = lines(run / "samples.jsonl")
    assert [row["step"] for row in samples] == steps
    first_epoch = [i for row in samples[:5] for i in row["sample_ids"]]
    assert sorted(first_epoch) == list(range(SIZE))  # 5 steps x 2 micro-batches x 4 rows
    assert reader_warnings(run) == []

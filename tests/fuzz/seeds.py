"""Valid inputs of every reader, to be mutated: the example run directories, and small files
written by the real tools (tensorboardX, torch's and tensorboard's writers, the wandb client,
transformers' ``TrainerState`` and ``TrainingArguments``, ``torch.save``) where the tests use them
elsewhere. Each seed is a source as ``{relative path: bytes}``.
"""

from __future__ import annotations

import argparse
import json
import struct
from pathlib import Path

import torch

Source = dict[str, bytes]

# data-loader states of each kind position_from_state knows (tests/ingest/test_data_state.py)
LOADER_STATES: list[dict] = [
    {"seed": 3, "shuffle": True, "epoch": 1, "consumed_in_epoch": 64},
    {"epoch": 2, "sample_in_epoch": 4096, "num_canonical_nodes": 8, "shuffle_seed": 9176},
    {"batches_processed": 10, "tokens_processed": 163840, "seed": 34521, "epoch": 1},
    {"skip_batches": 6, "epoch": 2, "seed": 42},
    {"global_step": 23, "steps_per_epoch": 10, "gradient_accumulation_steps": 2},
    {"consumed_train_samples": 800, "seed": 7},
    {
        "loops": {
            "fit_loop": {
                "epoch_progress": {"current": {"completed": 1}},
                "epoch_loop.batch_progress": {
                    "current": {"processed": 3},
                    "total": {"processed": 13},
                    "is_last_batch": False,
                },
            }
        }
    },
    {
        "_num_yielded": 3,
        "_sampler_iter_yielded": 3,
        "_sampler_iter_state": {
            "samples_yielded": 12,
            "sampler_iter_state": {"generator": [7, 0, 0, 0, 0, 0, 0, 0] + [0] * 8},
        },
    },
    {
        "_snapshot": {
            "_snapshot_step": 2,
            "_main_snapshot": {"_sampler_iter_state": {"samples_yielded": 8}},
        },
        "_steps_since_snapshot": 1,
    },
]


def read_tree(root: Path, prefix: str = "") -> Source:
    """Every regular file under ``root`` as ``{prefix + relative path: bytes}``."""
    return {
        prefix + p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def run_directory(example: Path, lines: int = 40) -> Source:
    """One example run (real training with an injected resume), each log cut to its first
    ``lines`` lines and three checkpoints, in a sub-folder as in an uploaded archive."""
    out: Source = {}
    for name in ("metrics.jsonl", "samples.jsonl", "evals.jsonl", "events.jsonl"):
        text = (example / name).read_bytes().split(b"\n")
        keep = text if name == "events.jsonl" else text[:lines]
        out[f"run/{name}"] = b"\n".join(keep).rstrip(b"\n") + b"\n"
    for folder in sorted((example / "checkpoints").iterdir())[:3]:
        for file in sorted(folder.iterdir()):
            out[f"run/checkpoints/{folder.name}/{file.name}"] = file.read_bytes()
    out["run/config.json"] = json.dumps({"lr": 0.1, "model": {"layers": 2}}).encode()
    return out


def loader_state_runs(base: Source) -> list[Source]:
    """The run with its first checkpoint's loader state replaced by each known kind."""
    manifest_path = next(p for p in sorted(base) if p.endswith("/manifest.json"))
    folder = manifest_path.rsplit("/", 1)[0]
    manifest = json.loads(base[manifest_path])
    out = []
    for state in LOADER_STATES:
        source = dict(base)
        for key in ("epoch", "consumed_in_epoch", "seed"):
            manifest.pop(key, None)
        manifest["components"]["dataloader"] = {"file": "loader.json", "bytes": 100}
        source[manifest_path] = json.dumps(manifest).encode()
        source[f"{folder}/loader.json"] = json.dumps(state).encode()
        out.append(source)
    return out


def tensorboard(tmp: Path) -> list[Source]:
    """tensorboardX and torch writers (a restart, purge_step, NaN, hparams) and a TF2-style
    file of tensor scalars written with tensorboard's own protos and record writer."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboardX import SummaryWriter as TbxWriter
    from torch.utils.tensorboard import SummaryWriter as TorchWriter

    tbx = tmp / "tbx"
    writer = TbxWriter(str(tbx / "run"))
    for step in range(1, 13):
        writer.add_scalar("train/loss", 4.0 / step, step)
        writer.add_scalar("lr", 0.1, step)
        if step % 4 == 0:
            writer.add_scalar("eval/acc", step / 12, step)
    writer.add_scalar("train/loss", float("nan"), 13)
    writer.close()
    writer = TbxWriter(str(tbx / "run"), purge_step=9)  # a restart that replays from step 9
    for step in range(9, 16):
        writer.add_scalar("train/loss", 3.0 / step, step)
    writer.close()

    torch_dir = tmp / "torch"
    writer = TorchWriter(str(torch_dir))
    for step in range(1, 6):
        writer.add_scalar("loss", 1.0 / step, step, new_style=True)
        writer.add_scalar("grad_norm", 0.5, step)
    writer.add_hparams({"lr": 0.1}, {"hparam/accuracy": 0.75})
    writer.close()

    tf2 = tmp / "tf2"
    events = EventFileWriter(str(tf2))
    scalars = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars"))
    for step in range(1, 5):
        content = TensorProto(
            dtype=1, tensor_shape=TensorShapeProto(), tensor_content=struct.pack("<f", step / 4)
        )
        count = TensorProto(dtype=9, tensor_shape=TensorShapeProto(), int64_val=[-step])
        values = [
            Summary.Value(tag="epoch_loss", tensor=content),
            Summary.Value(tag="delta", tensor=count),
        ]
        if step == 1:
            for value in values:
                value.metadata.CopyFrom(scalars)
        events.add_event(Event(wall_time=1000.0 + step, step=step, summary=Summary(value=values)))
    events.close()
    return [read_tree(tbx), read_tree(torch_dir), read_tree(tf2)]


def wandb(tmp: Path) -> list[Source]:
    """The finished, resumed and killed runs the W&B reader's tests write with the wandb client
    (only their ``run-<id>.wandb`` logs: nothing else of a run folder is read)."""
    from tests.ingest import wandb_runs

    runs = wandb_runs.write_runs(tmp)
    out = []
    for root in (runs.finished, runs.resumed, runs.crashed):
        out.append(
            {p.relative_to(root).as_posix(): p.read_bytes() for p in wandb_runs.log_files(root)}
        )
    return out


def hf_trainer(tmp: Path) -> list[Source]:
    """Trainer output written with transformers' own classes: ``TrainerState.save_to_json`` for
    the states (a resume from the first checkpoint that logged its steps again) and
    ``torch.save(TrainingArguments)`` for ``training_args.bin``, as the Trainer saves them."""
    from transformers import TrainerState, TrainingArguments

    out_dir = tmp / "hf"
    args = TrainingArguments(
        output_dir=str(out_dir), gradient_accumulation_steps=2, seed=7, report_to=[]
    )

    def history(steps: range, scale: float) -> list[dict]:
        rows: list[dict] = []
        for step in steps:
            rows.append(
                {"loss": scale / step, "learning_rate": 1e-3, "epoch": step / 8, "step": step}
            )
            if step % 4 == 0:
                rows.append({"eval_loss": scale / step, "epoch": step / 8, "step": step})
        return rows

    def save(folder: Path, step: int, log: list[dict], *, checkpoint: bool) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        state = TrainerState(
            global_step=step, max_steps=16, logging_steps=1, eval_steps=4, save_steps=4
        )
        state.epoch = step / 8
        state.train_batch_size = 4
        state.log_history = log
        state.save_to_json(str(folder / "trainer_state.json"))
        if checkpoint:
            torch.save(args, folder / "training_args.bin")
            (folder / "optimizer.pt").write_bytes(b"\0" * 16)
            (folder / "rng_state.pth").write_bytes(b"\0" * 8)

    first = history(range(1, 9), 1.0)
    save(out_dir / "checkpoint-4", 4, first[: len(history(range(1, 5), 1.0))], checkpoint=True)
    save(out_dir / "checkpoint-8", 8, first, checkpoint=True)  # the first process got this far
    resumed = first[: len(history(range(1, 5), 1.0))] + history(range(5, 13), 2.0)
    save(out_dir / "checkpoint-12", 12, resumed, checkpoint=True)
    final = [*resumed, {"train_runtime": 1.5, "train_samples_per_second": 9.0, "step": 12}]
    save(out_dir, 12, final, checkpoint=False)
    return [read_tree(out_dir, "output/")]


def _iteration(it: int, *, batch: int = 4, loss: float = 2.5) -> str:
    """A Megatron-LM ``training_log`` iteration line (its field widths)."""
    fields = [
        f" iteration {it:8d}/{1000:8d}",
        f" consumed samples: {it * batch:12d}",
        " elapsed time per iteration (ms): 1623.5",
        " learning rate: 1.471E-04",
        f" global batch size: {batch:5d}",
        f" lm loss: {loss:.6E}",
        " loss scale: 16384.0",
        " grad norm: 1.250",
        " number of skipped iterations:   0",
        " number of nan iterations:   0",
    ]
    return " |".join(fields) + " |"


def megatron(tmp: Path) -> list[Source]:
    """A log with a save, a crash and a resume from the save, and the checkpoint tree the run
    left (``torch.save`` of the state dict with its ``args`` Namespace, as Megatron saves it)."""
    root = tmp / "megatron"
    first = [
        "    will not load any checkpoints and will start from random",
        *(f"[2025-05-09 06:{10 + i:02d}:17]{_iteration(i * 10)}" for i in range(1, 5)),
        "saving checkpoint at iteration      20 to /ckpt",
        "  successfully saved checkpoint at iteration      20 to /ckpt",
        " validation loss at iteration 40 | lm loss value: 2.400000E+00 | lm loss PPL: 11.02 | ",
        "[exiting program after 1190.0 minutes] datetime: 2025-05-09 07:00:51",
    ]
    second = [
        " loading checkpoint from /ckpt at iteration 20",
        *(f"[default3]:{_iteration(i * 10, loss=2.0)}" for i in range(3, 7)),
        "[after training is done] datetime: 2025-05-09 09:00:00",
    ]
    root.mkdir(parents=True)
    (root / "train-1.log").write_text("\n".join(first) + "\n")
    (root / "train-2.log").write_text("\n".join(second) + "\n")
    save = root / "ckpt" / "iter_0000020" / "mp_rank_00"
    save.mkdir(parents=True)
    torch.save(
        {
            "args": argparse.Namespace(
                consumed_train_samples=80, global_batch_size=4, seed=1234, iteration=20
            ),
            "iteration": 20,
            "model": {"weight": torch.zeros(2, 2)},
        },
        save / "model_optim_rng.pt",
    )
    (root / "ckpt" / "latest_checkpointed_iteration.txt").write_text("20\n")
    return [read_tree(root, "job/")]

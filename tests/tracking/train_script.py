"""A small real training run that logs with RunLogger, for tests that crash and resume it.

    python tests/tracking/train_script.py --run-dir RUN --steps 40 --kill-at 23
    python tests/tracking/train_script.py --run-dir RUN --steps 40 --resume latest

Softmax regression on a fixed synthetic dataset; the data order is a DistributedSampler-style
permutation (seed + epoch), declared in config.json. Checkpoints hold model, optimizer, scheduler,
RNG and the loader position; a resume loads them and skips the consumed part of the epoch.
``--kill-at N`` sends this process SIGKILL right after step N is logged. With ``--server`` the
records are streamed too; ``--step-delay`` and ``--stream-interval`` give the stream time to send
before a kill (a killed process loses what it had not sent yet; its run directory has it all).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.tracking import RunLogger, SampleIdDataset, StepRecorder

FEATURES = 8
CLASSES = 4
COMPONENTS = ("model", "optimizer", "scheduler", "rng")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--server", default=None, help="stream to this Runwatch server too")
    parser.add_argument("--token", default=None)
    parser.add_argument("--project", default="tests")
    parser.add_argument("--name", default=None)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--resume", default=None, help="'latest' or a checkpoint name")
    parser.add_argument("--kill-at", type=int, default=None, help="SIGKILL self after this step")
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--dataset-size", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--accumulate", type=int, default=2, help="micro-batches per step")
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--step-delay", type=float, default=0.0, help="seconds to sleep per step")
    parser.add_argument(
        "--stream-interval", type=float, default=1.0, help="seconds between streamed batches"
    )
    parser.add_argument(
        "--close-timeout", type=float, default=5.0, help="seconds to wait at exit for the server"
    )
    parser.add_argument(
        "--max-backoff", type=float, default=30.0, help="longest wait between retries"
    )
    return parser.parse_args(argv)


def make_data(size: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(size, FEATURES, generator=generator)
    weights = torch.randn(FEATURES, CLASSES, generator=generator)
    return TensorDataset(x, (x @ weights).argmax(dim=1))


def epoch_order(size: int, seed: int, epoch: int) -> list[int]:
    generator = torch.Generator().manual_seed(seed + epoch)
    return torch.randperm(size, generator=generator).tolist()


class Momentum:
    """SGD with momentum and a 1/(1 + decay * step) schedule. (torch.optim imports
    torch._dynamo, seconds per process; this keeps the crash/resume tests quick.)"""

    def __init__(self, params: Any, lr: float = 0.05, momentum: float = 0.9) -> None:
        self.params = list(params)
        self.base_lr = lr
        self.momentum = momentum
        self.buffers = [torch.zeros_like(p) for p in self.params]
        self.steps = 0

    def lr(self) -> float:
        return self.base_lr / (1 + 0.05 * self.steps)

    def step(self) -> None:
        lr = self.lr()
        with torch.no_grad():
            for param, buffer in zip(self.params, self.buffers, strict=True):
                buffer.mul_(self.momentum).add_(param.grad)
                param.add_(buffer, alpha=-lr)
                param.grad = None
        self.steps += 1

    def optimizer_state(self) -> dict[str, Any]:
        return {"momentum": self.momentum, "buffers": [b.clone() for b in self.buffers]}

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        self.momentum = state["momentum"]
        self.buffers = [b.clone() for b in state["buffers"]]

    def scheduler_state(self) -> dict[str, Any]:
        return {"base_lr": self.base_lr, "steps": self.steps}

    def load_scheduler_state(self, state: dict[str, Any]) -> None:
        self.base_lr, self.steps = state["base_lr"], state["steps"]


def latest_checkpoint(run_dir: Path) -> str | None:
    steps = {}
    for manifest in (run_dir / "checkpoints").glob("*/manifest.json"):
        steps[manifest.parent.name] = json.loads(manifest.read_text())["step"]
    return max(steps, key=lambda name: steps[name]) if steps else None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)  # a tiny model: threads only contend with the loader workers
    torch.manual_seed(args.seed)
    data = make_data(args.dataset_size)
    steps_per_epoch = args.dataset_size // args.batch_size
    model = torch.nn.Linear(FEATURES, CLASSES)
    optimizer = Momentum(model.parameters())
    config = {
        "sampler": {"kind": "torch_distributed", "seed": args.seed, "drop_last": True},
        "dataset_size": args.dataset_size,
        "global_batch_size": args.batch_size,
        "accumulate": args.accumulate,
    }
    log = RunLogger(
        args.run_dir,
        project=args.project,
        name=args.name,
        server=args.server,
        token=args.token,
        config=config,
        stream_options={
            "interval": args.stream_interval,
            "close_timeout": args.close_timeout,
            "max_backoff": args.max_backoff,
        },
    )
    step, restored, source = 0, None, None
    position = {"epoch": 0, "consumed_in_epoch": 0}
    if args.resume is not None:
        source = latest_checkpoint(args.run_dir) if args.resume == "latest" else args.resume
    if source is not None:
        folder = args.run_dir / "checkpoints" / source
        step, position = load(folder, model, optimizer)
        restored = [*COMPONENTS, "dataloader"]
    with log:
        log.start(step, resumed_from=source, restored=restored)
        train(args, log, data, model, optimizer, step, position, steps_per_epoch)
    return 0


def train(
    args: argparse.Namespace,
    log: RunLogger,
    data: TensorDataset,
    model: torch.nn.Module,
    optimizer: Momentum,
    step: int,
    position: dict[str, int],
    steps_per_epoch: int,
) -> None:
    recorder = StepRecorder(log)
    dataset = SampleIdDataset(data)
    epoch_samples = steps_per_epoch * args.batch_size
    epoch, skip = position["epoch"], position["consumed_in_epoch"]
    while step < args.steps:
        order = epoch_order(args.dataset_size, args.seed, epoch)[:epoch_samples]
        loader = DataLoader(
            dataset,
            batch_size=args.batch_size // args.accumulate,
            sampler=order[skip:],  # a resume skips what the epoch consumed
            num_workers=args.num_workers,
        )
        batches = iter(loader)
        for _ in range((epoch_samples - skip) // args.batch_size):
            if step >= args.steps:
                return
            total = 0.0
            for _ in range(args.accumulate):
                ids, (x, y) = next(batches)
                loss = torch.nn.functional.cross_entropy(model(x), y) / args.accumulate
                loss.backward()
                recorder.add(ids)
                total += loss.item()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
            lr = optimizer.lr()
            optimizer.step()
            step += 1
            log.metrics(step, loss=total, lr=lr, grad_norm=grad_norm, epoch=step // steps_per_epoch)
            recorder.record(step)
            if step % args.eval_every == 0:
                with torch.no_grad():
                    x, y = data.tensors
                    log.eval(step, loss=torch.nn.functional.cross_entropy(model(x), y))
            if step % args.checkpoint_every == 0:
                save(args, log, model, optimizer, step, steps_per_epoch)
            if step == args.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(args.step_delay)
        epoch, skip = epoch + 1, 0


def save(
    args: argparse.Namespace,
    log: RunLogger,
    model: torch.nn.Module,
    optimizer: Momentum,
    step: int,
    steps_per_epoch: int,
) -> None:
    name = f"step_{step:06d}"
    folder = args.run_dir / "checkpoints" / name
    folder.mkdir(parents=True, exist_ok=True)
    epoch, done = divmod(step, steps_per_epoch)
    position = {
        "seed": args.seed,
        "shuffle": True,
        "epoch": epoch,
        "consumed_in_epoch": done * args.batch_size,
    }
    with log.saving(step):
        torch.save(model.state_dict(), folder / "model.pt")
        torch.save(optimizer.optimizer_state(), folder / "optimizer.pt")
        torch.save(optimizer.scheduler_state(), folder / "scheduler.pt")
        torch.save(torch.get_rng_state(), folder / "rng.pt")
        log.checkpoint(
            name,
            step,
            components={part: folder / f"{part}.pt" for part in COMPONENTS},
            consumed_samples=step * args.batch_size,
            dataset_size=args.dataset_size,
            global_batch_size=args.batch_size,
            data_state=position,
        )


def load(folder: Path, model: torch.nn.Module, optimizer: Momentum) -> tuple[int, dict[str, int]]:
    """Restore every component; return the step and the loader position."""
    manifest = json.loads((folder / "manifest.json").read_text())
    model.load_state_dict(torch.load(folder / "model.pt"))
    optimizer.load_optimizer_state(torch.load(folder / "optimizer.pt"))
    optimizer.load_scheduler_state(torch.load(folder / "scheduler.pt"))
    torch.set_rng_state(torch.load(folder / "rng.pt"))
    position = json.loads((folder / "sampler.json").read_text())
    return int(manifest["step"]), position


if __name__ == "__main__":
    sys.exit(main())

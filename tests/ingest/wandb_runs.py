"""Real W&B offline runs for the reader's tests, written by the wandb client in subprocesses
(an offline ``wandb.init`` starts a service process; a subprocess keeps it out of pytest), and
an independent decoder of their logs built on wandb's own protobuf classes."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FINISHED_ID = "fin1shed"
RESUMED_ID = "resum3d0"
CRASHED_ID = "cr4shed0"
LONG_KEY = "model/layers.10.self_attention.query.grad_norm"  # longer than 32 bytes encoded
LONG_TEXT = "x" * 70_000  # one record over three 32 KiB blocks
CRASH_ROWS = 3000

_COMMON = """
import math, os, signal, sys, time
import wandb
settings = wandb.Settings(x_stats_sampling_interval=0.1)
"""

FINISHED = f"""
run = wandb.init(
    project="runwatch-test", id="{FINISHED_ID}", settings=settings,
    config={{"lr": 3e-4, "optimizer": {{"name": "adamw", "betas": [0.9, 0.95]}},
             "warmup": float("nan")}},
)
run.config.update({{"batch_size": 32}})
for step in range(1, 41):
    row = {{"train": {{"loss": 4.0 / step, "acc": {{"top1": step / 100}}}},
           "lr": 3e-4, "{LONG_KEY}": 1.0 + step, "phase": "train", "flag": step % 2 == 0}}
    if step == 7:
        row["train"]["loss"] = float("nan")
    if step == 8:
        row["lr"] = float("inf")
    if step % 10 == 0:
        row.update({{"eval/loss": 3.0 / step, "eval_acc": 0.5, "val/ppl": 9.0, "test_f1": 0.25}})
    if step == 20:
        row["notes"] = "{LONG_TEXT[:10]}" * {len(LONG_TEXT) // 10}
    run.log(row, step=step)
    if step in (5, 25):
        time.sleep(0.35)  # let the system monitor sample between rows
run.summary["best_eval_loss"] = 0.075
run.summary["tag"] = "final"
run.summary["diverged_at"] = float("inf")
run.finish()
"""

RESUMED_FIRST = f"""
run = wandb.init(project="runwatch-test", id="{RESUMED_ID}", config={{"lr": 0.1}})
for step in range(1, 11):
    run.log({{"loss": 1.0 / step}}, step=step)
run.finish()
"""

# The resumed process restored the checkpoint of step 6 and replays steps 7..10, then fails.
RESUMED_SECOND = f"""
run = wandb.init(project="runwatch-test", id="{RESUMED_ID}", resume="allow", config={{"lr": 0.1}})
for step in range(7, 13):
    run.log({{"loss": 2.0 / step}}, step=step)
run.finish(exit_code=1)
"""

CRASHED = f"""
run = wandb.init(project="runwatch-test", id="{CRASHED_ID}")
for step in range(1, {CRASH_ROWS + 1}):
    run.log({{"loss": 1.0 / step, "grad_norm": 0.5}}, step=step)
time.sleep(1.5)  # the service writes whole blocks; give it time to write what it has
os.kill(os.getpid(), signal.SIGKILL)
"""


def _env(base: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(
        WANDB_MODE="offline",
        WANDB_DIR=str(base),
        WANDB_SILENT="true",
        WANDB_DISABLE_GIT="true",
        WANDB_DISABLE_CODE="true",
        WANDB_CONSOLE="off",
        WANDB_CONFIG_DIR=str(base / ".config"),
        WANDB_CACHE_DIR=str(base / ".cache"),
        WANDB_DATA_DIR=str(base / ".data"),
    )
    return env


def _start(script: str, base: Path) -> subprocess.Popen[bytes]:
    base.mkdir(parents=True, exist_ok=True)
    code = textwrap.dedent(_COMMON) + textwrap.dedent(script)
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env=_env(base),
        cwd=base,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _wait(proc: subprocess.Popen[bytes], *, killed: bool = False) -> None:
    out, _ = proc.communicate(timeout=120)
    expected = -9 if killed else 0
    if proc.returncode != expected:
        raise RuntimeError(f"wandb writer exited {proc.returncode}:\n{out.decode()[-3000:]}")


@dataclass
class Runs:
    finished: Path  # each holds wandb/<run folders>
    resumed: Path
    crashed: Path


def write_runs(base: Path) -> Runs:
    """The three runs, written concurrently (a few seconds in all)."""
    runs = Runs(base / "finished", base / "resumed", base / "crashed")
    finished = _start(FINISHED, runs.finished)
    crashed = _start(CRASHED, runs.crashed)
    first = _start(RESUMED_FIRST, runs.resumed)
    _wait(first)
    second = _start(RESUMED_SECOND, runs.resumed)
    _wait(finished)
    _wait(crashed, killed=True)
    _wait(second)
    return runs


def log_files(root: Path) -> list[Path]:
    """The run logs under ``root`` in folder order (``latest-run`` is a link: not counted)."""
    return sorted(p for p in root.glob("wandb/*run-*/run-*.wandb") if not p.parent.is_symlink())


def chunks(data: bytes) -> list[tuple[int, int, int]]:
    """``(offset, length, type)`` of every chunk of a whole log."""
    out = []
    pos = 7
    while pos + 7 <= len(data):
        room = 32768 - pos % 32768
        if room < 7:
            pos += room
            continue
        _, length, kind = struct.unpack_from("<IHB", data, pos)
        out.append((pos, length, kind))
        pos += 7 + length
    return out


def records(data: bytes) -> list[Any]:
    """The records of a whole log, decoded with wandb's protobuf classes."""
    from wandb.proto import wandb_internal_pb2 as pb

    out = []
    parts: list[bytes] = []
    for pos, length, kind in chunks(data):
        payload = data[pos + 7 : pos + 7 + length]
        assert (
            zlib.crc32(payload, zlib.crc32(bytes([kind]))) == struct.unpack_from("<I", data, pos)[0]
        )
        parts.append(payload)
        if kind in (1, 4):
            out.append(pb.Record.FromString(b"".join(parts)))
            parts = []
    return out


def history_rows(data: bytes) -> list[dict[str, Any]]:
    """History rows as ``{key: value}`` (nested keys joined with "/")."""
    rows = []
    for record in records(data):
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {
                    "/".join(item.nested_key) or item.key: json.loads(item.value_json)
                    for item in record.history.item
                }
            )
    return rows


def stats_by_row(data: bytes) -> dict[str, dict[int, float]]:
    """System samples on the history row before them (the first sample after a row)."""
    out: dict[str, dict[int, float]] = {}
    row = -1
    for record in records(data):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            row += 1
        elif kind == "stats" and row >= 0:
            for item in record.stats.item:
                out.setdefault("system/" + item.key, {}).setdefault(
                    row, json.loads(item.value_json)
                )
    return out

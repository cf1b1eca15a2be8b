"""Writes Runwatch's run-directory format.

Log files are opened in append mode by each process, so a resumed run's steps go back in the file.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

LOG_FILES = ("metrics.jsonl", "samples.jsonl", "events.jsonl", "evals.jsonl")
TRUTH_FILE = "truth.json"
CHECKPOINTS = "checkpoints"


class RunWriter:
    def __init__(self, root: Path) -> None:
        self.root = root

    def reset(self) -> None:
        """Start an empty run directory, removing only files this writer would write."""
        self.root.mkdir(parents=True, exist_ok=True)
        for name in (*LOG_FILES, TRUTH_FILE):
            (self.root / name).unlink(missing_ok=True)
        shutil.rmtree(self.root / CHECKPOINTS, ignore_errors=True)

    def open_process(self) -> ProcessLog:
        return ProcessLog(self.root)

    def write_checkpoint(
        self, name: str, manifest: Mapping[str, Any], files: Mapping[str, bytes]
    ) -> None:
        folder = self.root / CHECKPOINTS / name
        folder.mkdir(parents=True, exist_ok=True)
        for file, blob in files.items():
            (folder / file).write_bytes(blob)
        _write_json(folder / "manifest.json", manifest)

    def write_truth(self, truth: Mapping[str, Any]) -> None:
        _write_json(self.root / TRUTH_FILE, truth)


class ProcessLog:
    """The log files one process appends to; closing flushes them."""

    def __init__(self, root: Path) -> None:
        self._files: dict[str, IO[str]] = {
            name: (root / name).open("a", encoding="utf-8") for name in LOG_FILES
        }

    def _line(self, name: str, record: Mapping[str, Any]) -> None:
        self._files[name].write(json.dumps(record) + "\n")

    def metric(
        self, *, step: int, loss: float, lr: float, grad_norm: float, epoch: int, time: float
    ) -> None:
        record = {
            "step": step,
            "loss": round(loss, 6),
            "lr": lr,
            "grad_norm": round(grad_norm, 4),
            "epoch": epoch,
            "time": time,
        }
        self._line("metrics.jsonl", record)

    def samples(self, step: int, sample_ids: Sequence[int]) -> None:
        self._line("samples.jsonl", {"step": step, "sample_ids": list(sample_ids)})

    def event(self, event: str, step: int, time: float, **fields: Any) -> None:
        self._line("events.jsonl", {"event": event, "step": step, "time": time, **fields})

    def evaluation(self, step: int, class_accuracy: Sequence[float], time: float) -> None:
        record: dict[str, Any] = {"step": step}
        for label, accuracy in enumerate(class_accuracy):
            record[f"acc_class_{label}"] = round(accuracy, 4)
        record["time"] = time
        self._line("evals.jsonl", record)

    def close(self) -> None:
        for stream in self._files.values():
            stream.close()

    def __enter__(self) -> ProcessLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _write_json(path: Path, doc: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")

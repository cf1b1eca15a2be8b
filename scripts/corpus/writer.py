"""Writes Runwatch's run-directory format.

Each process appends to the log files when it ends (lines are buffered while it runs), so a
resumed run's steps go back in the file. Some runs leave out events.jsonl or samples.jsonl.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

LOG_FILES = ("metrics.jsonl", "samples.jsonl", "events.jsonl", "evals.jsonl")
CHECKPOINTS = "checkpoints"


class RunWriter:
    def __init__(
        self, root: Path, *, events: bool = True, samples: bool = True, evals: bool = True
    ) -> None:
        self.root = root
        self.enabled = {
            "metrics.jsonl": True,
            "samples.jsonl": samples,
            "events.jsonl": events,
            "evals.jsonl": evals,
        }

    def reset(self) -> None:
        """An empty run directory (files this writer would write are removed)."""
        self.root.mkdir(parents=True, exist_ok=True)
        for name in (*LOG_FILES, "truth.json", "config.json"):
            (self.root / name).unlink(missing_ok=True)
        shutil.rmtree(self.root / CHECKPOINTS, ignore_errors=True)

    def open_process(self) -> ProcessLog:
        return ProcessLog(self)

    def write_checkpoint(self, name: str, manifest: Mapping[str, Any], sampler: bytes) -> None:
        folder = self.root / CHECKPOINTS / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "sampler.json").write_bytes(sampler)
        write_json(folder / "manifest.json", manifest)

    def write_config(self, config: Mapping[str, Any]) -> None:
        write_json(self.root / "config.json", config)

    def write_truth(self, truth: Mapping[str, Any]) -> None:
        write_json(self.root / "truth.json", truth)


class ProcessLog:
    """The log lines of one process lifetime."""

    def __init__(self, writer: RunWriter) -> None:
        self.writer = writer
        self.lines: dict[str, list[str]] = {name: [] for name in LOG_FILES}

    def _line(self, name: str, record: Mapping[str, Any]) -> None:
        if self.writer.enabled[name]:
            self.lines[name].append(json.dumps(record))

    def metric(self, **record: Any) -> None:
        self._line("metrics.jsonl", record)

    def samples(self, step: int, sample_ids: list[int]) -> None:
        self._line("samples.jsonl", {"step": step, "sample_ids": sample_ids})

    def event(self, event: str, step: int, time: float, **fields: Any) -> None:
        self._line("events.jsonl", {"event": event, "step": step, "time": time, **fields})

    def evaluation(self, step: int, metrics: Mapping[str, float], time: float) -> None:
        record = {"step": step, **{k: round(v, 6) for k, v in metrics.items()}, "time": time}
        self._line("evals.jsonl", record)

    def close(self) -> None:
        for name, lines in self.lines.items():
            if lines:
                with (self.writer.root / name).open("a", encoding="utf-8") as stream:
                    stream.write("\n".join(lines) + "\n")
            lines.clear()

    def __enter__(self) -> ProcessLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def write_json(path: Path, doc: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")

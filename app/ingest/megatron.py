"""Reader for Megatron-LM / Megatron-DeepSpeed text logs and checkpoint trees.

Logs are ``*.log``, ``*.txt`` or ``*.out`` files whose head holds an iteration line; several are
read in natural name order, their lines parsed by :mod:`app.ingest.megatron_log` (iteration lines
become metrics, validation lines evals, save / load / exit lines events). Checkpoint trees
(``latest_checkpointed_iteration.txt``, ``iter_*`` folders) are read by
:mod:`app.ingest.megatron_checkpoints`. A checkpoint's consumed samples come from its saved
``args`` (or ``train_state.pt``), otherwise from the log line at its iteration, or from the line
before it plus the iterations between at the logged global batch size (a save between logged
lines); a save the log reports whose folder is not in the source is a checkpoint too.

Real Megatron needs GPUs; the tests write logs in exactly this shape and tiny checkpoint trees.
"""

from __future__ import annotations

import re
from typing import Any

from app.ingest.context import ReadContext
from app.ingest.megatron_checkpoints import (
    FORMAT,
    TRACKER,
    base_name,
    parent_folder,
    tracker_config,
    tree_checkpoints,
)
from app.ingest.megatron_log import LogParser
from app.ingest.records import CheckpointRecord, ParsedRun
from app.ingest.source import READ_ERRORS, SourceTree

LOG_SUFFIXES = (".log", ".txt", ".out")
DETECT_BYTES = 256 << 10  # real logs print all arguments (tens of KB) before the first iteration
MAX_DETECT_FILES = 50

_ITER_HEAD = re.compile(rb"iteration\s+\d+\s*/\s*\d+\s*\|\s*consumed samples:")


class MegatronReader:
    name = FORMAT

    def detect(self, tree: SourceTree) -> str | None:
        files = tree.files()
        places = [parent_folder(f) for f in files if base_name(f) == TRACKER]
        places += [parent_folder(f) for f in _log_files(tree, files, MAX_DETECT_FILES)]
        return _common_folder(places) if places else None

    def read(self, ctx: ReadContext, root: str) -> ParsedRun:
        prefix = f"{root}/" if root else ""
        files = [f for f in ctx.tree.files() if f.startswith(prefix)]
        saved = tree_checkpoints(ctx, files, prefix)
        parser = LogParser(ctx, {c.step: c.name for c in saved})
        logs = sorted(_log_files(ctx.tree, files), key=_natural)
        for index, path in enumerate(logs):
            parser.feed(path, first=index == 0)
        if not logs:
            ctx.warnings.add(f"{ctx.tree.name}: no Megatron training log; only checkpoints read")
        checkpoints = _merge_checkpoints(saved, parser)
        config: dict[str, Any] = {"megatron": {"log_files": logs, **parser.config}}
        config["megatron"].update(tracker_config(ctx, files, checkpoints))
        batches = parser.batch_sizes or {
            c.global_batch_size for c in checkpoints if c.global_batch_size is not None
        }
        return ParsedRun(
            source_format=FORMAT,
            metrics=parser.train.table(),
            evals=parser.evals.table() if parser.evals.steps else None,
            events=parser.finish(),
            checkpoints=checkpoints,
            config=config,
            global_batch_size=batches.pop() if len(batches) == 1 else None,
        )


reader = MegatronReader()


def _merge_checkpoints(saved: list[CheckpointRecord], parser: LogParser) -> list[CheckpointRecord]:
    """Checkpoint folders, plus saves the log reports whose folder is not in the source."""
    by_step = {c.step: c for c in saved}
    for step in sorted(parser.completed):
        if step not in by_step:
            manifest = {"source": FORMAT, "from_log": True}
            by_step[step] = CheckpointRecord(name=f"iter_{step:07d}", step=step, manifest=manifest)
    for step, record in by_step.items():
        if record.consumed_samples is None:
            record.consumed_samples = parser.consumed_at(step)
        start, end = parser.saves.get(step, (None, None))
        record.time_start = record.time_start if record.time_start is not None else start
        record.time_end = record.time_end if record.time_end is not None else end
    return sorted(by_step.values(), key=lambda r: (r.step, r.name))


def _log_files(tree: SourceTree, files: list[str], limit: int | None = None) -> list[str]:
    """Text files whose head holds a Megatron iteration line (of the first ``limit`` ones)."""
    found: list[str] = []
    candidates = [f for f in files if f.endswith(LOG_SUFFIXES) and base_name(f) != TRACKER]
    for path in candidates[:limit]:
        try:
            with tree.open(path) as stream:
                head = stream.read(DETECT_BYTES)
        except (*READ_ERRORS, ValueError):
            continue  # a damaged member: not read as a log (the reader that reads it says why)
        if _ITER_HEAD.search(head):
            found.append(path)
    return found


def _natural(path: str) -> list[Any]:
    """``train-2.log`` before ``train-10.log``: runs of digits compare as numbers (by length
    without leading zeros, then text, so any length of digits is fine)."""
    parts = re.split(r"(\d+)", path)
    return [(len(p.lstrip("0")), p) if i % 2 else p for i, p in enumerate(parts)]


def _common_folder(folders: list[str]) -> str:
    split = [f.split("/") if f else [] for f in folders]
    common: list[str] = []
    for parts in zip(*split, strict=False):
        if any(p != parts[0] for p in parts):
            break
        common.append(parts[0])
    return "/".join(common)

"""Reader for Hugging Face ``transformers.Trainer`` output folders.

    <output_dir>/trainer_state.json                 final state (written by ``save_state()``)
    <output_dir>/checkpoint-<global_step>/trainer_state.json, optimizer.pt, scheduler.pt,
        rng_state.pth | rng_state_<rank>.pth, scaler.pt, training_args.bin, model weights

A source may also be one checkpoint folder or a lone ``trainer_state.json``. Metrics come from
the ``log_history`` of the newest state (it holds the fullest history): training entries become
metrics, ``eval_*`` entries evals, the final summary (``train_runtime``...)
``config["hf_summary"]`` (:mod:`app.ingest.hf_history`).
Every ``checkpoint-*`` folder becomes a checkpoint, with its consumed samples derived from the
global step (:mod:`app.ingest.hf_checkpoints`). Resumes are read from where the checkpoints'
histories diverge from the newest one and from the logged epoch going back
(:mod:`app.ingest.hf_resumes`). Git LFS pointer files are refused with a clear error.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from app.ingest.context import ReadContext
from app.ingest.errors import IngestError
from app.ingest.hf_checkpoints import (
    CHECKPOINT_DIR,
    FORMAT,
    checkpoint_record,
    is_checkpoint,
    jsonable,
    state_folders,
)
from app.ingest.hf_history import State, history_tables
from app.ingest.hf_resumes import lifecycle, resume_segments, split_epoch_resets
from app.ingest.jsonl import parse_json
from app.ingest.records import MetricTable, ParsedRun
from app.ingest.source import SourceTree

STATE_FILE = "trainer_state.json"
LFS_POINTER = b"version https://git-lfs.github.com/spec/v1"
MAX_STATES = 1000  # checkpoint states of one run: their histories are compared pairwise


class HFTrainerReader:
    name = FORMAT

    def detect(self, tree: SourceTree) -> str | None:
        files = tree.files()
        if len(files) == 1 and files[0].rsplit("/", 1)[-1].endswith(STATE_FILE):
            return _parent(files[0])
        present = set(files)
        folders = {_parent(f) for f in files if f.rsplit("/", 1)[-1] == STATE_FILE}
        if not folders:
            return None
        state_dirs = state_folders(present)
        roots = {_parent(f) if f and is_checkpoint(f, state_dirs) else f for f in sorted(folders)}
        depth = min(_depth(r) for r in roots)
        top = sorted(r for r in roots if _depth(r) == depth)
        if len(top) > 1:
            raise IngestError(
                f"holds several Trainer output folders ({', '.join(top[:4])}); ingest one run per"
                " source",
                file=tree.name,
            )
        return top[0]

    def read(self, ctx: ReadContext, root: str) -> ParsedRun:
        return _Read(ctx, root).run()


reader = HFTrainerReader()


class _Read:
    def __init__(self, ctx: ReadContext, root: str) -> None:
        self.ctx = ctx
        self.root = root
        self.files = set(ctx.tree.files())
        self.state_dirs = state_folders(self.files)
        self.entry_codes: dict[str, int] = {}  # equal log entries of any state, equal codes

    def run(self) -> ParsedRun:
        states = self._states()
        if not states:
            raise IngestError(f"no {STATE_FILE} found", file=self.ctx.tree.name)
        segments = split_epoch_resets(resume_segments(self.ctx, states), states, self.ctx)
        train, evals, summary = history_tables(self.ctx, segments)
        checkpoints = [checkpoint_record(self.ctx, self.files, s) for s in states if s.checkpoint]
        checkpoints.sort(key=lambda c: (c.step, c.name))
        main = states[-1]
        config: dict[str, Any] = {
            "hf_trainer": jsonable({k: v for k, v in main.doc.items() if k != "log_history"})
        }
        if summary is not None:
            config["hf_summary"] = jsonable(summary)
        batches = {c.global_batch_size for c in checkpoints if c.global_batch_size is not None}
        metrics = train.table()
        if metrics.num_rows == 0:
            self.ctx.warnings.add(f"{main.path}: log_history has no training entries")
        _warn_non_finite(metrics, main.path, self.ctx)
        eval_table = evals.table() if evals.steps else None
        if eval_table is not None:
            _warn_non_finite(eval_table, main.path, self.ctx)
        return ParsedRun(
            source_format=FORMAT,
            metrics=metrics,
            evals=eval_table,
            events=lifecycle(segments) if len(segments) > 1 else [],
            checkpoints=checkpoints,
            config=config,
            global_batch_size=batches.pop() if len(batches) == 1 else None,
        )

    # -- finding and loading states ---------------------------------------------------------

    def _states(self) -> list[State]:
        prefix = f"{self.root}/" if self.root else ""
        states: list[State] = []
        own = prefix + STATE_FILE
        if len(self.files) == 1:
            own = next(iter(self.files))  # a lone state file, whatever its name
        if own in self.files:
            states.append(self._load(own, self.root, is_checkpoint(self.root, self.state_dirs)))
        found = []
        for path in sorted(self.files):
            rest = path[len(prefix) :] if path.startswith(prefix) else None
            if rest is None or rest.count("/") != 1 or not rest.endswith("/" + STATE_FILE):
                continue
            if is_checkpoint(_parent(path), self.state_dirs):
                found.append(path)
        if len(found) > MAX_STATES:
            raise IngestError(
                f"holds {len(found)} checkpoint folders with a {STATE_FILE}, more than"
                f" {MAX_STATES}; ingest a run's output folder with fewer checkpoints",
                file=self.ctx.tree.name,
            )
        states += [self._load(path, _parent(path), True) for path in found]
        states.sort(key=lambda s: (s.step, not s.checkpoint, len(s.entries)))
        return states

    def _load(self, path: str, folder: str, checkpoint: bool) -> State:
        raw = self.ctx.read_bytes(path)
        if raw.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(LFS_POINTER):
            raise IngestError(
                "a Git LFS pointer, not the file (fetch it with `git lfs pull`)", file=path
            )
        try:
            doc = parse_json(raw)
        except (ValueError, RecursionError) as exc:
            raise IngestError(f"not valid JSON ({str(exc)[:200]})", file=path) from None
        if not isinstance(doc, dict):
            raise IngestError(f"expected a JSON object, got {type(doc).__name__}", file=path)
        step = doc.get("global_step")
        if type(step) is not int or not 0 <= step < 2**62:
            raise IngestError(f"'global_step' must be a step number, got {step!r:.40}", file=path)
        history = doc.get("log_history") or []
        if not isinstance(history, list):
            raise IngestError("'log_history' must be a list", file=path)
        entries = [e for e in history if isinstance(e, dict)]
        name = folder.rsplit("/", 1)[-1] if folder else self.ctx.tree.name
        if checkpoint and not CHECKPOINT_DIR.fullmatch(name):
            name = f"checkpoint-{step}"
        if not checkpoint:
            name = path.rsplit("/", 1)[-1]
        codes = self.entry_codes
        keys = np.fromiter(
            (codes.setdefault(repr(sorted(e.items())), len(codes)) for e in entries),
            dtype=np.int64,
            count=len(entries),
        )
        return State(name, folder, path, doc, step, entries, keys, checkpoint)


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


def _depth(folder: str) -> int:
    return folder.count("/") + 1 if folder else 0


def _warn_non_finite(table: MetricTable, path: str, ctx: ReadContext) -> None:
    for key, (rows, values) in table.columns.items():
        bad = ~np.isfinite(values)
        if bad.any():
            first = int(np.argmax(bad))
            ctx.warnings.add(
                f"{path}: {int(bad.sum())} non-finite value(s) of '{table.source_keys[key]}' kept"
                f" (first at step {int(table.steps[rows[first]])}: {values[first]})"
            )

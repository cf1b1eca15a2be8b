"""Reader for Hugging Face ``transformers.Trainer`` output folders.

    <output_dir>/trainer_state.json                 final state (written by ``save_state()``)
    <output_dir>/checkpoint-<global_step>/trainer_state.json, optimizer.pt, scheduler.pt,
        rng_state.pth | rng_state_<rank>.pth, scaler.pt, training_args.bin, model weights

A source may also be one checkpoint folder or a lone ``trainer_state.json``. Metrics come from
the ``log_history`` of the newest state (it holds the fullest history): training entries become
metrics, ``eval_*`` entries evals, the final summary (``train_runtime``...)
``config["hf_summary"]``.
Every ``checkpoint-*`` folder becomes a checkpoint; its components are the state files present.

The Trainer keeps no loader state: a resume re-derives the data position from ``global_step``,
skipping ``global_step % steps_per_epoch`` optimizer steps x ``gradient_accumulation_steps``
batches of the resumed epoch (none with ``ignore_data_skip``). A checkpoint's consumed samples are
therefore ``global_step`` x ``train_batch_size`` x gradient accumulation x processes, with the
accumulation read from ``training_args.bin`` (its pickle opcodes, never unpickled) and the process
count from the ``rng_state_<rank>.pth`` files. A short last batch or a last partial accumulation
of an epoch makes this an upper bound.

Resumes. A resumed process loads the checkpoint's ``trainer_state.json`` and appends to its
history, so a resume from the newest checkpoint leaves no trace in any history. What can be seen:

- a checkpoint whose history diverges from the newest one's: a process logged past a checkpoint
  and a later process resumed from that checkpoint (or an earlier one) and logged those steps
  again. The resume is at the latest checkpoint before the first differing entry; the earlier
  process's entries are kept as rows that the later process replays. Identical replays (a
  deterministic resume) are invisible, and harmless.
- the logged ``epoch`` going back while the step rises: the resumed process restarted its epoch
  count, i.e. did not skip the data it had consumed (``ignore_data_skip``, streaming datasets).

Checkpoints of two different runs side by side (their logging/eval/save steps or batch size
differ, or their histories differ from the first entry) are refused, naming both folders.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.ingest.context import ReadContext
from app.ingest.data_state import pickled_scalars
from app.ingest.errors import IngestError
from app.ingest.jsonl import parse_json
from app.ingest.records import (
    CheckpointRecord,
    ComponentRecord,
    EventRecord,
    MetricTable,
    ParsedRun,
)
from app.ingest.source import SourceTree

FORMAT = "hf_trainer"
STATE_FILE = "trainer_state.json"
LFS_POINTER = b"version https://git-lfs.github.com/spec/v1"
MAX_ARGS_BYTES = 1 << 20

_CHECKPOINT_DIR = re.compile(r"checkpoint-\d+")
_RNG_FILE = re.compile(r"rng_state(?:_(\d+))?\.pth")
_CHECKPOINT_FILES = ("optimizer.pt", "scheduler.pt", "rng_state.pth", "scaler.pt")
# kept from the checkpoint on resume, so they differ only between different runs
_RUN_SETTINGS = ("logging_steps", "eval_steps", "save_steps", "train_batch_size")
_EVAL_PREFIXES = ("eval_", "test_", "predict_")
_SUMMARY_KEYS = ("train_runtime", "train_samples_per_second")
_ARGS_KEYS = ("gradient_accumulation_steps", "seed", "data_seed", "ignore_data_skip")
_INT64 = 1 << 63


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
        roots = {_parent(f) if f and _is_checkpoint(f, present) else f for f in sorted(folders)}
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


@dataclass
class _State:
    name: str  # checkpoint folder name, or the state file's own name
    folder: str
    path: str
    doc: dict[str, Any]
    step: int
    entries: list[dict[str, Any]]
    keys: list[str]  # one comparable string per entry
    checkpoint: bool


@dataclass
class _Segment:
    """One process's share of a history: entries[lo:hi] of ``state``."""

    state: _State
    lo: int
    hi: int
    start_step: int
    resumed_from: str | None = None
    evidence: str | None = None


@dataclass
class _Table:
    steps: list[int] = field(default_factory=list)
    columns: dict[str, tuple[list[int], list[float]]] = field(default_factory=dict)
    source_keys: dict[str, str] = field(default_factory=dict)
    _row_keys: set[str] = field(default_factory=set)

    def add(self, step: int, values: list[tuple[str, str, float]], *, new_row: bool) -> bool:
        """Add one entry; one at the step of the row before joins it. False if a key repeats."""
        if new_row or not self.steps or self.steps[-1] != step:
            self.steps.append(step)
            self._row_keys = set()
        row = len(self.steps) - 1
        clean = True
        for canonical, source, value in values:
            if canonical in self._row_keys:
                clean = False
                continue
            self._row_keys.add(canonical)
            column = self.columns.setdefault(canonical, ([], []))
            self.source_keys.setdefault(canonical, source)
            column[0].append(row)
            column[1].append(value)
        return clean

    def table(self) -> MetricTable:
        out = MetricTable(
            steps=np.asarray(self.steps, dtype=np.int64),
            times=np.full(len(self.steps), np.nan),
            source_keys=self.source_keys,
        )
        for key, (rows, values) in self.columns.items():
            out.columns[key] = (np.asarray(rows, dtype=np.int64), np.asarray(values, np.float64))
        return out


class _Read:
    def __init__(self, ctx: ReadContext, root: str) -> None:
        self.ctx = ctx
        self.root = root
        self.files = set(ctx.tree.files())

    def run(self) -> ParsedRun:
        states = self._states()
        if not states:
            raise IngestError(f"no {STATE_FILE} found", file=self.ctx.tree.name)
        segments = _split_epoch_resets(self._lineage(states), states, self.ctx)
        train, evals, summary = self._tables(segments)
        checkpoints = [self._checkpoint(s) for s in states if s.checkpoint]
        checkpoints.sort(key=lambda c: (c.step, c.name))
        main = states[-1]
        config: dict[str, Any] = {
            "hf_trainer": _jsonable({k: v for k, v in main.doc.items() if k != "log_history"})
        }
        if summary is not None:
            config["hf_summary"] = _jsonable(summary)
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
            events=_lifecycle(segments) if len(segments) > 1 else [],
            checkpoints=checkpoints,
            config=config,
            global_batch_size=batches.pop() if len(batches) == 1 else None,
        )

    # -- finding and loading states ---------------------------------------------------------

    def _states(self) -> list[_State]:
        prefix = f"{self.root}/" if self.root else ""
        states: list[_State] = []
        own = prefix + STATE_FILE
        if len(self.files) == 1:
            own = next(iter(self.files))  # a lone state file, whatever its name
        if own in self.files:
            states.append(self._load(own, self.root, _is_checkpoint(self.root, self.files)))
        for path in sorted(self.files):
            rest = path[len(prefix) :] if path.startswith(prefix) else None
            if rest is None or rest.count("/") != 1 or not rest.endswith("/" + STATE_FILE):
                continue
            folder = _parent(path)
            if _is_checkpoint(folder, self.files):
                states.append(self._load(path, folder, True))
        states.sort(key=lambda s: (s.step, not s.checkpoint, len(s.entries)))
        return states

    def _load(self, path: str, folder: str, checkpoint: bool) -> _State:
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
        if checkpoint and not _CHECKPOINT_DIR.fullmatch(name):
            name = f"checkpoint-{step}"
        if not checkpoint:
            name = path.rsplit("/", 1)[-1]
        keys = [repr(sorted(e.items())) for e in entries]
        return _State(name, folder, path, doc, step, entries, keys, checkpoint)

    # -- which process logged which entries -------------------------------------------------

    def _lineage(self, states: list[_State]) -> list[_Segment]:
        main = states[-1]
        first_save = min((s.step for s in states if s.checkpoint), default=None)
        leaves: dict[tuple[str, ...], _State] = {}
        for state in states[:-1]:
            shared = _lcp(state.keys, main.keys)
            if shared == len(state.keys):
                continue  # a prefix of the newest history: nothing was lost
            _check_same_run(state, main, shared, first_save)
            leaves.setdefault(tuple(state.keys), state)
        branches = [
            s
            for s in leaves.values()
            if not any(o is not s and _lcp(s.keys, o.keys) == len(s.keys) for o in leaves.values())
        ]
        order = [*sorted(branches, key=lambda s: (_lcp(s.keys, main.keys), s.step)), main]
        segments = [_Segment(order[0], 0, len(order[0].entries), 0)]
        for k, state in enumerate(order[1:], start=1):
            shared, other = max(((_lcp(state.keys, o.keys), o) for o in order[:k]), key=_first)
            differ = [
                s
                for s in (_step_from(state.entries, shared), _step_from(other.entries, shared))
                if s is not None
            ]
            first_new = min(differ) if differ else state.step + 1
            saved = _latest_checkpoint(states, state, lo=0, hi=first_new)
            if saved is None:
                start_step = _last_step(state.entries[:shared])
                self.ctx.warnings.add(
                    f"{other.name} holds log entries after step {start_step} that {state.name}"
                    " logged again: a resume from a checkpoint no longer in the source",
                    kind="hf-resume",
                )
            else:
                start_step = saved.step
                self.ctx.warnings.add(
                    f"{other.name} holds log entries after step {start_step} that {state.name}"
                    f" logged again: a resume from {saved.name}",
                    kind="hf-resume",
                )
            steps = [_step(e) for e in state.entries]
            lo = next(
                (i for i, s in enumerate(steps) if s is not None and s > start_step), len(steps)
            )
            segments.append(
                _Segment(
                    state,
                    lo,
                    len(state.entries),
                    start_step,
                    None if saved is None else saved.name,
                    f"{other.name} holds an earlier process's log entries past step {start_step}",
                )
            )
        return segments

    # -- rows ---------------------------------------------------------------------------------

    def _tables(self, segments: list[_Segment]) -> tuple[_Table, _Table, dict[str, Any] | None]:
        train, evals = _Table(), _Table()
        summary: dict[str, Any] | None = None
        stepless = 0
        for segment in segments:
            first_train = first_eval = True
            for entry in segment.state.entries[segment.lo : segment.hi]:
                step = _step(entry)
                if step is None:
                    stepless += 1
                    continue
                if any(k in entry for k in _SUMMARY_KEYS):
                    summary = entry
                    continue
                path = segment.state.path
                if any(k.startswith(_EVAL_PREFIXES) for k in entry):
                    values = self._values(entry, path, evaluation=True)
                    clean = evals.add(step, values, new_row=first_eval)
                    first_eval = False
                else:
                    values = self._values(entry, path, evaluation=False)
                    clean = train.add(step, values, new_row=first_train)
                    first_train = False
                if not clean:
                    self.ctx.warnings.add(
                        f"{path}: several log entries at step {step} set the same metric; the"
                        " first is kept",
                        kind="hf-repeat",
                    )
        if stepless:
            self.ctx.warnings.add(
                f"{segments[-1].state.path}: {stepless} log_history entries without a 'step'"
                " (such as predict_* results) skipped"
            )
        return train, evals, summary

    def _values(
        self, entry: dict[str, Any], path: str, *, evaluation: bool
    ) -> list[tuple[str, str, float]]:
        out: list[tuple[str, str, float]] = []
        for key, value in _flat_items(entry):
            if key == "step" or (evaluation and key == "epoch"):
                continue
            number = self._number(key, value, path)
            if number is None:
                continue
            if evaluation:
                canonical = "eval/" + (key[len("eval_") :] if key.startswith("eval_") else key)
            else:
                canonical = self.ctx.aliases.canonical(key)
            out.append((canonical, key, number))
        return out

    def _number(self, key: str, value: Any, path: str) -> float | None:
        kind = type(value)
        if kind is float:
            return float(value)
        if kind is int:
            try:
                return float(value)
            except OverflowError:
                self.ctx.warnings.add(
                    f"{path}: '{key}' holds a number too large for float64; not stored",
                    kind=f"{path}:{key}:big",
                )
                return None
        if value is None or kind is bool:
            return None
        self.ctx.warnings.add(
            f"{path}: '{key}' is a {kind.__name__}, not a number; not stored",
            kind=f"{path}:{key}:type",
        )
        return None

    # -- checkpoints --------------------------------------------------------------------------

    def _checkpoint(self, state: _State) -> CheckpointRecord:
        prefix = f"{state.folder}/" if state.folder else ""
        inside = {
            f[len(prefix) :]: self.ctx.tree.sizes[f]
            for f in self.files
            if f.startswith(prefix) and f != state.path
        }
        ranks = [m for m in (_RNG_FILE.fullmatch(r) for r in inside) if m]
        world = max(1, sum(1 for m in ranks if m.group(1) is not None)) if ranks else None
        args = self._training_args(prefix + "training_args.bin")
        accumulation = args.get("gradient_accumulation_steps")
        accumulation = accumulation if type(accumulation) is int and accumulation > 0 else None
        per_device = state.doc.get("train_batch_size")
        batch = None
        if type(per_device) is int and per_device > 0:
            batch = per_device * (accumulation or 1) * (world or 1)
            if accumulation is None or world is None:
                self.ctx.warnings.add(
                    f"{state.name}: consumed samples assume no gradient accumulation and one"
                    " process where training_args.bin or rng_state files do not say",
                    kind="hf-batch",
                )
        epoch = _finite(state.doc.get("epoch"))
        seed = args.get("data_seed") if type(args.get("data_seed")) is int else args.get("seed")
        return CheckpointRecord(
            name=state.name,
            step=state.step,
            consumed_samples=None if batch is None else state.step * batch,
            epoch=None if epoch is None else math.floor(epoch),
            seed=seed if type(seed) is int else None,
            global_batch_size=batch,
            components=_components(inside),
            manifest=_jsonable(
                {
                    "source": FORMAT,
                    "folder": state.folder,
                    "global_step": state.step,
                    "epoch": epoch,
                    "max_steps": state.doc.get("max_steps"),
                    "train_batch_size": per_device,
                    "world_size": world,
                    "training_args": args,
                }
            ),
        )

    def _training_args(self, path: str) -> dict[str, Any]:
        if path not in self.files or self.ctx.tree.sizes[path] > MAX_ARGS_BYTES:
            return {}
        with self.ctx.open(path) as stream:
            return pickled_scalars(stream, _ARGS_KEYS, limit=MAX_ARGS_BYTES)


def _check_same_run(state: _State, main: _State, shared: int, first_save: int | None) -> None:
    settings = [
        k for k in _RUN_SETTINGS if k in state.doc and k in main.doc and state.doc[k] != main.doc[k]
    ]
    first = _step_from(state.entries, 0)
    early = shared == 0 and first is not None and first <= (first_save or 0)
    if settings or early:
        why = (
            f"their {', '.join(settings)} differ"
            if settings
            else "their log histories differ from the first entry"
        )
        raise IngestError(
            f"{state.folder or state.name} and {main.folder or main.name} are checkpoints of two"
            f" different training runs ({why}); ingest one run per source",
            file=state.path,
        )


def _split_epoch_resets(
    segments: list[_Segment], states: list[_State], ctx: ReadContext
) -> list[_Segment]:
    """Split a segment where the logged epoch goes back while the step rises: a resumed process
    that restarted its epoch count instead of skipping the data it had consumed."""
    out: list[_Segment] = []
    for original in segments:
        current = original
        state, lo, hi = original.state, original.lo, original.hi
        last_epoch: float | None = None
        last_step = original.start_step
        for index in range(lo, hi):
            entry = state.entries[index]
            step, epoch = _step(entry), _finite(entry.get("epoch"))
            if step is None or epoch is None or _is_eval_or_summary(entry):
                continue
            if last_epoch is not None and epoch < last_epoch - 1e-9 and step > last_step:
                saved = _latest_checkpoint(states, state, lo=last_step, hi=step)
                evidence = f"epoch went back from {last_epoch} to {epoch} at step {step}"
                ctx.warnings.add(
                    f"{state.path}: {evidence}: a resume that restarted the epoch instead of"
                    " skipping the data already consumed",
                    kind="hf-epoch-reset",
                )
                current.hi = index
                out.append(current)
                start = last_step if saved is None else saved.step
                name = None if saved is None else saved.name
                current = _Segment(state, index, hi, start, name, evidence)
            last_epoch, last_step = epoch, step
        out.append(current)
    return out


def _lifecycle(segments: list[_Segment]) -> list[EventRecord]:
    events: list[EventRecord] = []
    for k, segment in enumerate(segments):
        payload: dict[str, Any] = {"resumed_from": segment.resumed_from}
        if segment.evidence and k > 0:
            payload["evidence"] = segment.evidence
        events.append(EventRecord("process_start", segment.start_step, None, payload))
        if k < len(segments) - 1:
            steps = [_step(e) for e in segment.state.entries[segment.lo : segment.hi]]
            last = max((s for s in steps if s is not None), default=segment.start_step)
            events.append(EventRecord("process_exit", last, None, {"reason": "unknown"}))
    return events


def _latest_checkpoint(states: list[_State], lineage: _State, *, lo: int, hi: int) -> _State | None:
    """The newest checkpoint in [lo, hi) whose history is a prefix of ``lineage``'s."""
    found = [
        s
        for s in states
        if s.checkpoint and lo <= s.step < hi and _lcp(s.keys, lineage.keys) == len(s.keys)
    ]
    return max(found, key=lambda s: s.step) if found else None


def _components(inside: dict[str, int]) -> dict[str, ComponentRecord]:
    grouped: dict[str, list[tuple[str, int]]] = {}
    for rel, size in sorted(inside.items()):
        kind = _component_of(rel)
        if kind is not None:
            grouped.setdefault(kind, []).append((rel, size))
    out = {
        kind: ComponentRecord(file=parts[0][0], bytes=sum(size for _, size in parts))
        for kind, parts in grouped.items()
    }
    states = sorted(r for r in inside if r.endswith("model_states.pt"))
    if "scheduler" not in out and states:
        out["scheduler"] = ComponentRecord(states[0], None)  # inside DeepSpeed's model states
    return out


def _component_of(rel: str) -> str | None:
    """Which checkpoint component a file inside a checkpoint folder holds (DeepSpeed and FSDP
    sub-folders included)."""
    name = rel.rsplit("/", 1)[-1]
    top = rel.split("/", 1)[0]
    if name == "scheduler.pt":
        return "scheduler"
    if name == "scaler.pt":
        return "scaler"
    if _RNG_FILE.fullmatch(name):
        return "rng"
    if name == "optimizer.pt" or name.endswith(("-optimizer.pt", "optim_states.pt")):
        return "optimizer"
    if top.startswith("optimizer_") and "/" in rel:
        return "optimizer"
    if name.endswith("model_states.pt") or (top.startswith("pytorch_model_fsdp") and "/" in rel):
        return "model"
    if name == "training_args.bin":
        return None
    if name.endswith(".safetensors") or (
        name.endswith((".bin", ".h5", ".msgpack")) and "model" in name
    ):
        return "model"
    return None


def _is_checkpoint(folder: str, files: set[str]) -> bool:
    """A folder the Trainer saved a checkpoint into (not the output folder's final state)."""
    name = folder.rsplit("/", 1)[-1]
    if name and _CHECKPOINT_DIR.fullmatch(name):
        return True
    prefix = f"{folder}/" if folder else ""
    return any(prefix + f in files for f in _CHECKPOINT_FILES) or any(
        f.startswith(prefix + "rng_state_") for f in files
    )


def _is_eval_or_summary(entry: dict[str, Any]) -> bool:
    return any(k.startswith(_EVAL_PREFIXES) or k in _SUMMARY_KEYS for k in entry)


def _flat_items(obj: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in obj.items():
        if isinstance(value, dict):
            out.extend(_flat_items(value, f"{prefix}{key}/"))
        else:
            out.append((prefix + str(key), value))
    return out


def _step(entry: dict[str, Any]) -> int | None:
    value = entry.get("step")
    if type(value) is float and value.is_integer():
        value = int(value)
    return value if type(value) is int and 0 <= value < 2**62 else None


def _step_from(entries: list[dict[str, Any]], index: int) -> int | None:
    return next((s for s in (_step(e) for e in entries[index:]) if s is not None), None)


def _last_step(entries: list[dict[str, Any]]) -> int:
    return next((s for s in (_step(e) for e in reversed(entries)) if s is not None), 0)


def _finite(value: Any) -> float | None:
    if type(value) in (int, float) and math.isfinite(value):
        return float(value)
    return None


def _lcp(a: list[str], b: list[str]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _first(pair: tuple[int, _State]) -> int:
    return pair[0]


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


def _jsonable(value: Any) -> Any:
    """JSON a database column accepts: NaN/Infinity become None, integers beyond int64 text."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if type(value) is float and not math.isfinite(value):
        return None
    if type(value) is int and not -_INT64 <= value < _INT64:
        return str(value)
    return value

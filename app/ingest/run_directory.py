"""Reader for Runwatch's run-directory format.

    <run>/metrics.jsonl                  one line per logged optimizer step (required)
    <run>/samples.jsonl                  {"step", "sample_ids": [...]}
    <run>/events.jsonl                   process_start / process_exit / checkpoint_save_* ...
    <run>/evals.jsonl                    periodic evaluation metrics
    <run>/config.json                    run configuration (optional)
    <run>/checkpoints/<name>/manifest.json

Every file but ``metrics.jsonl`` is optional. A single ``.jsonl`` file is read as a metrics log.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import IO, Any

import numpy as np

from app.ingest.aliases import STEP_KEYS, TIME_KEYS
from app.ingest.context import ReadContext
from app.ingest.data_state import position_from_state
from app.ingest.errors import IngestError
from app.ingest.jsonl import gc_paused
from app.ingest.metric_columns import STEP, TIME, MetricTableBuilder, as_step, as_time
from app.ingest.records import (
    CheckpointRecord,
    ComponentRecord,
    EventRecord,
    MetricTable,
    ParsedRun,
    SampleTrace,
)
from app.ingest.source import SourceTree

FORMAT = "run_directory"
METRICS = "metrics.jsonl"
NUMERIC_KEYS = frozenset({"loss", "lr", "grad_norm", "loss_scale", "consumed_samples", "epoch"})
SAMPLE_ID_KEYS = ("sample_ids", "ids", "indices", "sample_indices")
EVENT_KIND_KEYS = ("event", "type", "kind")
MAX_DATA_STATE_BYTES = 1 << 20

_STEP_SET = frozenset(STEP_KEYS)
_TIME_SET = frozenset(TIME_KEYS)


class RunDirectoryReader:
    """Parses one run directory (or a lone metrics file) into a :class:`ParsedRun`. Other
    readers use :meth:`add_companions` for the run-directory files a source holds beside its own
    format (a sample trace, events and checkpoint manifests next to a W&B run, say)."""

    name = FORMAT

    def __init__(self, ctx: ReadContext, root: str | None = None) -> None:
        self.ctx = ctx
        self.tree = ctx.tree
        self.aliases = ctx.aliases
        self.warnings = ctx.warnings
        self.root = find_run_root(ctx.tree) if root is None else root

    @staticmethod
    def detect(tree: SourceTree) -> str | None:
        files = tree.files()
        if any(f == METRICS or f.endswith("/" + METRICS) for f in files):
            return find_run_root(tree)
        if len(files) == 1 and files[0].endswith(".jsonl"):
            return ""
        return None

    def path(self, name: str) -> str:
        return f"{self.root}/{name}" if self.root else name

    def read(self) -> ParsedRun:
        files = set(self.tree.files())
        metrics_file = self._metrics_file(files)
        metrics = self._read_metric_table(metrics_file, prefix=None)
        parsed = ParsedRun(source_format=FORMAT, metrics=metrics)
        self.add_companions(parsed)
        return parsed

    def add_companions(self, parsed: ParsedRun) -> None:
        """Fill what ``parsed`` lacks from run-directory files under the root, when present."""
        files = set(self.tree.files())
        evals_path = self.path("evals.jsonl")
        if parsed.evals is None and evals_path in files:
            parsed.evals = self._read_metric_table(evals_path, prefix="eval/")
        samples_path = self.path("samples.jsonl")
        if parsed.samples is None and samples_path in files:
            parsed.samples = self._read_samples(samples_path)
        events_path = self.path("events.jsonl")
        if events_path in files:
            parsed.events = self._read_events(events_path)  # recorded events win
        if not parsed.checkpoints:
            parsed.checkpoints = self._read_checkpoints(files)
        _fill_save_times_from_events(parsed.checkpoints, parsed.events)
        config_path = self.path("config.json")
        if config_path in files:
            parsed.config = {**parsed.config, **self.ctx.json_doc(config_path)}
        if parsed.dataset_size is None:
            parsed.dataset_size = _consistent(parsed.checkpoints, "dataset_size", parsed.config)
        if parsed.global_batch_size is None:
            parsed.global_batch_size = _consistent(
                parsed.checkpoints, "global_batch_size", parsed.config
            )

    def _metrics_file(self, files: set[str]) -> str:
        wanted = self.path(METRICS)
        if wanted in files:
            return wanted
        lone = [f for f in files if f.endswith(".jsonl")]
        if len(files) == 1 and len(lone) == 1:
            return lone[0]
        raise IngestError(
            f"no {METRICS} found; a run directory needs one (found: {_listing(files)})",
            file=self.tree.name,
        )

    def _open(self, path: str) -> Any:
        return self.ctx.open(path)

    def _objects(self, path: str, stream: IO[bytes]) -> Iterator[tuple[int, dict[str, Any]]]:
        return self.ctx.objects(path, stream)

    def _read_metric_table(self, path: str, *, prefix: str | None) -> MetricTable:
        builder = MetricTableBuilder(
            path, lambda key: self._classify(key, prefix), self.warnings, NUMERIC_KEYS
        )
        with self._open(path) as stream, gc_paused():
            for linenos, objs in self.ctx.blocks(path, stream):
                builder.add(linenos, objs)
        return builder.finish()

    def _classify(self, key: str, prefix: str | None) -> str:
        if key in _STEP_SET:
            return STEP
        if key in _TIME_SET:
            return TIME
        if prefix is None:
            return self.aliases.canonical(key)
        bare = key[len("eval_") :] if key.startswith(("eval_", "eval/")) else key
        return prefix + bare

    def _read_samples(self, path: str) -> SampleTrace:
        if path in self.ctx.samples:
            return self.ctx.samples[path]
        with self._open(path) as stream:
            return read_sample_lines(self._objects(path, stream), path)

    def _read_events(self, path: str) -> list[EventRecord]:
        events: list[EventRecord] = []
        with self._open(path) as stream:
            for lineno, obj in self._objects(path, stream):
                kind_key = next((k for k in EVENT_KIND_KEYS if k in obj), None)
                kind = obj.get(kind_key) if kind_key else None
                if not isinstance(kind, str) or not kind:
                    raise IngestError(
                        "event has no 'event' name (a non-empty string)", file=path, line=lineno
                    )
                payload = {k: v for k, v in obj.items() if k not in (kind_key, "step", "time")}
                step = obj.get("step")
                when = obj.get("time")
                events.append(
                    EventRecord(
                        kind=kind,
                        step=None if step is None else as_step(step, path, lineno, "step"),
                        time=None if when is None else as_time(when, path, lineno, "time"),
                        payload=payload,
                        line=lineno,
                    )
                )
        return events

    def _read_checkpoints(self, files: set[str]) -> list[CheckpointRecord]:
        prefix = self.path("checkpoints/")
        manifests = sorted(
            f
            for f in files
            if f.startswith(prefix)
            and f.endswith("/manifest.json")
            and f.count("/") == prefix.count("/") + 1
        )
        records = [self._read_manifest(path, files) for path in manifests]
        records.sort(key=lambda r: (r.step, r.name))
        return records

    def _read_manifest(self, path: str, files: set[str]) -> CheckpointRecord:
        doc = self.ctx.json_doc(path)
        folder = path.rsplit("/", 2)[-2]
        step = _opt_int(doc, "step", path)
        if step is None:
            step = _step_from_name(folder)
            if step is None:
                raise IngestError("manifest has no 'step' and the folder name has none", file=path)
        components = _components(doc.get("components"), path)
        record = CheckpointRecord(
            name=folder,
            step=step,
            time_start=_opt_float(doc, "time_start", path),
            time_end=_opt_float(doc, "time_end", path),
            consumed_samples=_opt_int(doc, "consumed_samples", path),
            epoch=_opt_int(doc, "epoch", path),
            consumed_in_epoch=_opt_int(doc, "consumed_in_epoch", path),
            seed=_opt_int(doc, "seed", path),
            shuffle=_opt_bool(doc, "shuffle", path),
            dataset_size=_opt_int(doc, "dataset_size", path),
            global_batch_size=_opt_int(doc, "global_batch_size", path),
            components=components,
            manifest=doc,
        )
        state = doc.get("data_state")
        if isinstance(state, dict):
            record.data_state = state
        loader = components.get("dataloader")
        if record.data_state is None and loader is not None and loader.file:
            state_path = path.rsplit("/", 1)[0] + "/" + loader.file
            if (
                state_path in files
                and state_path.endswith(".json")
                and self.tree.sizes[state_path] <= MAX_DATA_STATE_BYTES
            ):
                record.data_state = self.ctx.json_doc(state_path)
        if record.data_state is not None:
            _fill_position(record)
        return record


def read_sample_lines(objects: Iterator[tuple[int, dict[str, Any]]], path: str) -> SampleTrace:
    """A sample trace from the ``(line number, object)`` pairs of ``samples.jsonl`` (or a part
    of it)."""
    steps: list[int] = []
    counts: list[int] = []
    chunks: list[np.ndarray] = []
    for lineno, obj in objects:
        step_key = next((k for k in STEP_KEYS if k in obj), None)
        if step_key is None:
            raise IngestError("no step field", file=path, line=lineno)
        step = as_step(obj[step_key], path, lineno, step_key)
        ids_key = next((k for k in SAMPLE_ID_KEYS if k in obj), None)
        if ids_key is None:
            raise IngestError(
                f"no sample id list (expected one of: {', '.join(SAMPLE_ID_KEYS)})",
                file=path,
                line=lineno,
            )
        ids = _as_ids(obj[ids_key], path, lineno, ids_key)
        steps.append(step)
        counts.append(ids.size)
        chunks.append(ids)
    ids_all = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)
    return SampleTrace(
        steps=np.asarray(steps, dtype=np.int64),
        counts=np.asarray(counts, dtype=np.int64),
        ids=ids_all.astype(np.int64, copy=False),
    )


def find_run_root(tree: SourceTree) -> str:
    """The shallowest folder holding ``metrics.jsonl`` ("" for the top of the source)."""
    candidates = [f for f in tree.files() if f == METRICS or f.endswith("/" + METRICS)]
    if not candidates:
        return ""
    depth = min(c.count("/") for c in candidates)
    top = [c for c in candidates if c.count("/") == depth]
    if len(top) > 1:
        raise IngestError(
            f"holds several runs ({', '.join(top[:4])}); ingest one run per source",
            file=tree.name,
        )
    return top[0].rsplit("/", 1)[0] if "/" in top[0] else ""


def _as_ids(value: Any, path: str, line: int, key: str) -> np.ndarray:
    if type(value) is not list:
        raise IngestError(f"'{key}' must be a list of integers", file=path, line=line)
    try:
        ids = np.asarray(value) if value else np.zeros(0, dtype=np.int64)
    except (ValueError, OverflowError):
        raise IngestError(
            f"'{key}' must be a flat list of integers", file=path, line=line
        ) from None
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise IngestError(f"'{key}' must be a flat list of integers", file=path, line=line)
    if ids.size and int(ids.min()) < 0:
        raise IngestError(f"'{key}' holds a negative id ({int(ids.min())})", file=path, line=line)
    return ids


def _opt_int(doc: dict[str, Any], key: str, path: str) -> int | None:
    value = doc.get(key)
    if value is None:
        return None
    if type(value) is float and value.is_integer():
        value = int(value)
    if type(value) is not int:
        raise IngestError(f"field '{key}' must be an integer, got {value!r:.40}", file=path)
    return value


def _opt_float(doc: dict[str, Any], key: str, path: str) -> float | None:
    value = doc.get(key)
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value):
        raise IngestError(f"field '{key}' must be a finite number, got {value!r:.40}", file=path)
    return float(value)


def _opt_bool(doc: dict[str, Any], key: str, path: str) -> bool | None:
    value = doc.get(key)
    if value is None or type(value) is bool:
        return value
    raise IngestError(f"field '{key}' must be true or false, got {value!r:.40}", file=path)


def _components(raw: Any, path: str) -> dict[str, ComponentRecord]:
    if raw is None:
        return {}
    if isinstance(raw, list):
        return {str(name).lower(): ComponentRecord(None, None) for name in raw}
    if not isinstance(raw, dict):
        raise IngestError("field 'components' must be an object or a list", file=path)
    out: dict[str, ComponentRecord] = {}
    for name, spec in raw.items():
        if isinstance(spec, str):
            out[name.lower()] = ComponentRecord(spec, None)
        elif isinstance(spec, dict):
            size = spec.get("bytes", spec.get("size"))
            if size is not None and type(size) is not int:
                raise IngestError(f"component '{name}' has a non-integer size", file=path)
            file = spec.get("file")
            out[name.lower()] = ComponentRecord(None if file is None else str(file), size)
        elif spec is None or spec is True:
            out[name.lower()] = ComponentRecord(None, None)
        else:
            raise IngestError(f"component '{name}' must be an object", file=path)
    return out


def _fill_position(record: CheckpointRecord) -> None:
    """Epoch, position and seed from the loader state, where the manifest does not say."""
    assert record.data_state is not None
    position = position_from_state(record.data_state, batch_size=record.global_batch_size)
    if position is None:
        return
    if record.epoch is None:
        record.epoch = position.epoch
    if record.consumed_in_epoch is None:
        record.consumed_in_epoch = position.consumed_in_epoch
    if record.seed is None:
        record.seed = position.seed
    if record.consumed_samples is None:
        record.consumed_samples = position.consumed_samples


def _step_from_name(name: str) -> int | None:
    digits = re.findall(r"\d+", name)
    return int(digits[-1]) if digits else None


def _fill_save_times_from_events(
    checkpoints: list[CheckpointRecord], events: list[EventRecord]
) -> None:
    starts: dict[int, float] = {}
    ends: dict[int, float] = {}
    for event in events:
        if event.step is None or event.time is None:
            continue
        if event.kind == "checkpoint_save_start":
            starts[event.step] = event.time
        elif event.kind == "checkpoint_save_end":
            ends[event.step] = event.time
    for ckpt in checkpoints:
        if ckpt.time_start is None:
            ckpt.time_start = starts.get(ckpt.step)
        if ckpt.time_end is None:
            ckpt.time_end = ends.get(ckpt.step)


def _consistent(
    checkpoints: list[CheckpointRecord], field: str, config: dict[str, Any]
) -> int | None:
    values = {getattr(c, field) for c in checkpoints if getattr(c, field) is not None}
    if len(values) >= 1:
        return int(max(values))
    value = config.get(field)
    return value if type(value) is int else None


def _listing(files: set[str]) -> str:
    names = sorted(files)
    if not names:
        return "nothing"
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")

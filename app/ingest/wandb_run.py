"""Reader for W&B runs: the ``run-<id>.wandb`` transaction log of each process of one run id.

    wandb/offline-run-<YYYYMMDD_HHMMSS>-<id>/run-<id>.wandb     (offline)
    wandb/run-<YYYYMMDD_HHMMSS>-<id>/run-<id>.wandb             (online runs leave the same log)

Every folder of the run id is one process lifetime (``wandb.init(id=..., resume=...)`` starts a
new folder), ordered by the start time in its ``run`` record; together they are one run with one
segment per folder. History rows become metric rows in file order: ``_step`` is the step,
``_timestamp`` the time, nested keys are joined with "/", other ``_`` keys are W&B's own and
eval-looking keys (``eval/``, ``eval_``, ``val/``, ``val_``, ``test/``, ``test_``) go to the eval
table (``eval_loss`` and ``eval/loss`` as ``eval/loss``, ``val/loss`` as ``eval/val/loss``).

System metrics (``stats`` records, sampled on a timer, not per step) are stored as
``system/<key>`` metrics on the closest preceding history row of the same folder, so they share
that row's step and time: the first sample after a row is kept, later ones before the next row
are dropped, and samples taken before a folder's first row (process start-up) are dropped.

Only numbers are metrics (NaN and infinities are kept); other values are skipped with one
warning per key. The run's config (``_wandb`` dropped, ``{"value": ...}`` unwrapped) becomes the
config, with the final summary's scalars under ``wandb_summary``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.ingest import wandb_log as wl
from app.ingest.context import ReadContext
from app.ingest.errors import IngestError
from app.ingest.jsonl import parse_json
from app.ingest.records import EventRecord, MetricTable, ParsedRun
from app.ingest.source import SourceTree

FORMAT = "wandb"
EVAL_PREFIXES = ("eval/", "eval_", "val/", "val_", "test/", "test_")
SYSTEM_PREFIX = "system/"
MAX_SUMMARY_KEYS = 500
MAX_SUMMARY_TEXT = 200

_FILE = re.compile(r"^run-(?P<id>[^/]+)\.wandb$")
_FOLDER = re.compile(r"^(?:offline-)?run-(?P<stamp>\d{8}_\d{6})-(?P<id>[^/]+)$")
_WHAT = {ord('"'): "text", ord("{"): "object", ord("["): "list", ord("t"): "boolean"}
_WHAT[ord("f")] = "boolean"


@dataclass(frozen=True)
class LogFile:
    path: str  # in the source tree
    run_id: str
    folder: str  # the run folder's name ("" for a lone file)
    root: str  # the folder that holds the run folders


def find_logs(tree: SourceTree) -> list[LogFile]:
    """Every ``run-<id>.wandb`` of the source."""
    logs = []
    for path in tree.files():
        parts = path.split("/")
        found = _FILE.match(parts[-1])
        if found is None or "latest-run" in parts[:-1]:
            continue  # latest-run is W&B's link to the newest folder, not a folder of its own
        folder = parts[-2] if len(parts) > 1 else ""
        if _FOLDER.match(folder):
            root = "/".join(parts[:-2])
        else:
            folder, root = "", "/".join(parts[:-1])
        logs.append(LogFile(path, found.group("id"), folder, root))
    return logs


def run_ids(tree: SourceTree) -> dict[str, list[str]]:
    """Run id -> its ``.wandb`` files, oldest folder first (by the folder's timestamp)."""
    out: dict[str, list[LogFile]] = {}
    for log in find_logs(tree):
        out.setdefault(log.run_id, []).append(log)
    return {run_id: [log.path for log in sorted(logs, key=_stamp)] for run_id, logs in out.items()}


def _stamp(log: LogFile) -> tuple[str, str]:
    found = _FOLDER.match(log.folder)
    return (found.group("stamp") if found else "", log.path)


class WandbReader:
    name = FORMAT

    def detect(self, tree: SourceTree) -> str | None:
        logs = find_logs(tree)
        if not logs:
            return None
        _one_run_id(logs, tree)
        roots = sorted({log.root for log in logs})
        if len(roots) > 1:
            raise IngestError(
                f"holds W&B run {logs[0].run_id} in several folders"
                f" ({', '.join(r or '.' for r in roots)}); ingest one folder per source",
                file=tree.name,
            )
        return roots[0]

    def read(self, ctx: ReadContext, root: str) -> ParsedRun:
        logs = [log for log in find_logs(ctx.tree) if log.root == root]
        if not logs:
            raise IngestError(f"no W&B run log (run-<id>.wandb) under '{root}'", file=ctx.tree.name)
        _one_run_id(logs, ctx.tree)
        keys = wl.KeyTable()
        parts = []
        for log in logs:
            with ctx.open(log.path) as stream:
                data = wl.decode_log(stream, log.path, ctx.warnings, keys, on_bytes=ctx.on_bytes)
            parts.append(_Part(log, data))
        return _assemble(ctx, sorted(parts, key=_Part.order), keys.names)


reader = WandbReader()


def _one_run_id(logs: list[LogFile], tree: SourceTree) -> None:
    ids = sorted({log.run_id for log in logs})
    if len(ids) > 1:
        raise IngestError(
            f"holds W&B runs {', '.join(ids)}: ingest one run id per source", file=tree.name
        )


@dataclass
class _Part:
    """One folder's log, and where its rows start among the run's."""

    log: LogFile
    data: wl.LogData
    first_row: int = 0

    def order(self) -> tuple[float, str, str]:
        start = self.data.start_time
        return (math.inf if start is None else start, _stamp(self.log)[0], self.log.path)


# Assembling the folders of one run id into a ParsedRun.


def _assemble(ctx: ReadContext, parts: list[_Part], names: list[str]) -> ParsedRun:
    rows = 0
    for part in parts:
        part.first_row, rows = rows, rows + part.data.rows
    if rows == 0:
        files = ", ".join(p.log.path for p in parts)
        raise IngestError(f"no history rows in {files}", file=ctx.tree.name)
    steps = np.concatenate([p.data.steps for p in parts])
    times = np.concatenate([p.data.times for p in parts])
    items = wl.Items.concat(
        [p.data.items for p in parts if p.data.items is not None],
        [p.first_row for p in parts if p.data.items is not None],
    )
    metric_keys, eval_keys, logged = _key_names(ctx, names)
    _warn_non_numeric(ctx, items, names, parts)
    metrics = MetricTable(steps=steps, times=times)
    _fill(metrics, items, metric_keys, logged)
    evals: MetricTable | None = None
    in_evals = np.isin(items.code, list(eval_keys)) & (items.kind == wl.NUMBER)
    if in_evals.any():
        eval_items = items.take(in_evals)
        eval_rows = np.unique(eval_items.row)
        evals = MetricTable(steps=steps[eval_rows], times=times[eval_rows])
        eval_items.row = np.searchsorted(eval_rows, eval_items.row)
        _fill(evals, eval_items, eval_keys, logged)
    _add_system(metrics, parts)
    for table in (metrics, evals):
        if table is not None:
            _warn_non_finite(ctx, table, parts)
    config = _config(parts)
    summary = _summary(ctx, parts, names)
    if summary:
        config["wandb_summary"] = summary
    return ParsedRun(
        source_format=FORMAT,
        metrics=metrics,
        evals=evals,
        events=_events(ctx, parts),
        config=config,
        external_id=next((p.data.run_id for p in parts if p.data.run_id), parts[0].log.run_id),
    )


def _part_of(parts: list[_Part], row: int) -> _Part:
    return [p for p in parts if p.first_row <= row][-1]


def _key_names(
    ctx: ReadContext, names: list[str]
) -> tuple[dict[int, str], dict[int, str], dict[int, str]]:
    """Metric and eval column names by key code, and the logged names; keys starting with
    "_" are W&B's own."""
    metric: dict[int, str] = {}
    evals: dict[int, str] = {}
    logged: dict[int, str] = {}
    for code, name in enumerate(names):
        if not name or name.startswith("_"):
            continue
        logged[code] = name
        if name.startswith(EVAL_PREFIXES):
            evals[code] = eval_key(name)
        else:
            metric[code] = ctx.aliases.canonical(name)
    return metric, evals, logged


def eval_key(name: str) -> str:
    """``eval/loss`` and ``eval_loss`` as ``eval/loss``; other eval prefixes are kept:
    ``val/loss`` as ``eval/val/loss``."""
    if name.startswith(("eval/", "eval_")):
        return "eval/" + name[5:]
    return "eval/" + name


def _fill(
    table: MetricTable, items: wl.Items, keys: dict[int, str], logged: dict[int, str]
) -> None:
    """Numeric items of ``keys`` as the table's columns; two keys of one canonical name on one
    row keep the first."""
    use = (items.kind == wl.NUMBER) & np.isin(items.code, list(keys))
    if not use.any():
        return
    names = sorted(set(keys.values()))
    lookup = np.full(max(keys) + 1, -1, dtype=np.int64)
    for code, name in keys.items():
        lookup[code] = names.index(name)
    codes, rows, values = items.code[use], items.row[use], items.value[use]
    column = lookup[codes]
    order = np.lexsort((np.arange(rows.size), rows, column))
    column, rows, values, codes = column[order], rows[order], values[order], codes[order]
    keep = np.ones(rows.size, dtype=bool)
    keep[1:] = (column[1:] != column[:-1]) | (rows[1:] != rows[:-1])
    column, rows, values, codes = column[keep], rows[keep], values[keep], codes[keep]
    bounds = np.searchsorted(column, np.arange(len(names) + 1))
    for n, name in enumerate(names):
        lo, hi = int(bounds[n]), int(bounds[n + 1])
        if lo < hi:
            table.columns[name] = (rows[lo:hi].astype(np.int64), values[lo:hi])
            table.source_keys[name] = logged[int(codes[lo])]


def _add_system(metrics: MetricTable, parts: list[_Part]) -> None:
    """System samples onto the closest preceding history row of the same folder."""
    found: dict[str, tuple[list[int], list[float]]] = {}
    for part in parts:
        for sample in part.data.samples:
            if sample.row < 0:
                continue  # before the folder's first row: process start-up
            row = part.first_row + sample.row
            for key, raw in sample.values:
                value = _number(raw)
                if value is None:
                    continue
                rows, values = found.setdefault(SYSTEM_PREFIX + key, ([], []))
                if not rows or rows[-1] != row:  # one sample per row: the first after it
                    rows.append(row)
                    values.append(value)
    for key, (rows, values) in found.items():
        if key not in metrics.columns:  # a logged metric of that name wins
            metrics.columns[key] = (np.asarray(rows, dtype=np.int64), np.asarray(values))
            metrics.source_keys[key] = key


def _number(raw: bytes | None) -> float | None:
    try:
        return None if raw is None else float(raw)
    except ValueError:
        return None


def _warn_non_numeric(
    ctx: ReadContext, items: wl.Items, names: list[str], parts: list[_Part]
) -> None:
    other = np.flatnonzero(items.kind == wl.OTHER)
    codes, first = np.unique(items.code[other], return_index=True)
    for code, at in zip(codes.tolist(), first.tolist(), strict=True):
        if names[code].startswith("_"):
            continue
        i = int(other[at])
        what = _WHAT.get(int(items.first_byte[i]), "malformed")
        ctx.warnings.add(
            f"{_part_of(parts, int(items.row[i])).log.path}: '{names[code]}' holds {what}"
            " values, not numbers; not stored",
            kind="wandb-non-numeric",
        )


def _warn_non_finite(ctx: ReadContext, table: MetricTable, parts: list[_Part]) -> None:
    for key, (rows, values) in table.columns.items():
        bad = ~np.isfinite(values)
        if bad.any():
            first = int(np.argmax(bad))
            row = int(rows[first])
            ctx.warnings.add(
                f"{_part_of(parts, row).log.path}: {int(bad.sum())} non-finite value(s) of"
                f" '{table.source_keys[key]}' kept (first at step {int(table.steps[row])}:"
                f" {values[first]})",
                kind="wandb-non-finite",
            )


def _config(parts: list[_Part]) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for part in parts:
        for remove, path, raw in part.data.config_ops:
            if remove:
                _remove(config, path)
            elif raw is not None:
                try:
                    _set(config, path, _unwrap(parse_json(raw)))
                except (ValueError, RecursionError):
                    continue
    config.pop("_wandb", None)
    return _json_safe(config)


def _set(config: dict[str, Any], path: list[str], value: Any) -> None:
    node = config
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[path[-1]] = value


def _remove(config: dict[str, Any], path: list[str]) -> None:
    node: Any = config
    for part in path[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(path[-1], None)


def _unwrap(value: Any) -> Any:
    """W&B's ``{"value": v, "desc": ...}`` config form as ``v``."""
    if isinstance(value, dict) and "value" in value and set(value) <= {"value", "desc"}:
        return value["value"]
    return value


def _json_safe(value: Any) -> Any:
    """NaN and infinities as strings: PostgreSQL's JSON refuses them."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def _summary(ctx: ReadContext, parts: list[_Part], names: list[str]) -> dict[str, Any]:
    """The final summary's scalars (numbers, booleans, short text); W&B's own keys dropped."""
    last: dict[str, bytes | None] = {}
    for part in parts:
        for code, raw in part.data.summary.items():
            last[names[code]] = raw
    out: dict[str, Any] = {}
    for name in sorted(last):
        raw = last[name]
        if raw is None or not name or name.startswith("_"):
            continue
        try:
            value = parse_json(raw)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, str) and len(value) > MAX_SUMMARY_TEXT:
            continue
        if value is None or isinstance(value, dict | list):
            continue
        if len(out) >= MAX_SUMMARY_KEYS:
            ctx.warnings.add(f"W&B summary: more than {MAX_SUMMARY_KEYS} keys; the rest dropped")
            break
        out[name] = _json_safe(value)
    return out


def _events(ctx: ReadContext, parts: list[_Part]) -> list[EventRecord]:
    """A ``process_start``/``process_exit`` pair per folder that logged history rows."""
    events: list[EventRecord] = []
    previous_end: float | None = None
    for part in parts:
        data = part.data
        if data.rows == 0:
            ctx.warnings.add(
                f"{part.log.path}: no history rows; this process is not counted as a segment"
            )
            continue
        steps, times = data.steps, data.times
        known = times[np.isfinite(times)]
        first = int(steps[0])
        start = max(first - 1, 0)
        if not events and not data.resumed and steps.size > 1:
            interval = max(int(np.median(np.diff(steps))), 1)
            start = 0 if first <= interval else start  # a fresh run starts at step 0
        began = data.start_time
        if began is None or (known.size and began > known[0]):
            began = float(known[0]) if known.size else None
        if began is not None and previous_end is not None and began <= previous_end:
            began = None  # clocks disagree: leave the split to the steps
        payload: dict[str, Any] = {"resumed_from": None, "wandb_folder": part.log.folder}
        if events:
            payload["resumed_from"] = f"W&B run {data.run_id or part.log.run_id} resumed"
        if data.starting_step > 0:
            payload["wandb_starting_step"] = data.starting_step
        events.append(EventRecord("process_start", start, began, payload))
        seen = [s.time for s in data.samples if s.time is not None]
        ended = max([*seen, float(known[-1])] if known.size else seen, default=None)
        last = int(steps.max())
        if data.exit_code is None:
            ctx.warnings.add(
                f"{part.log.path}: no exit record; the process crashed or was killed (its"
                f" segment ends at step {last})"
            )
            reason = "crash"
        else:
            reason = "finished" if data.exit_code == 0 else "crash"
        exit_payload = {"reason": reason, "exit_code": data.exit_code}
        events.append(EventRecord("process_exit", last, ended, exit_payload))
        previous_end = ended if ended is not None else previous_end
    return events

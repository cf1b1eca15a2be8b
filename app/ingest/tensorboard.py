"""Reader for TensorBoard event files (``events.out.tfevents.<time>.<host>[...]``).

Every scalar point is read, in both styles: ``simple_value`` (tensorboardX, ``torch``'s
``add_scalar``) and one-element tensors under the ``scalars`` plugin (TF2, ``new_style``).

Layout. The run is the deepest folder holding all event files. Files are ordered by the time in
their names, then by their first record. Files written at overlapping times belong to one
process; when the run's folder has several sub-folders (TensorBoard's logdir layout: a folder per
``add_scalars`` series, ``train``/``validation``, ...) and some were written at the same time,
tags are prefixed with their folder (``validation/epoch_loss``); tags in the run's own folder are
never prefixed. Sub-folders written one after another (a new ``runs/<date>`` or ``version_<n>``
per launch) are read as consecutive launches of the one run, with unprefixed tags.

Rows. Rows keep file order, so a restart that replays steps shows as steps going back. Points
of one step logged one after another form one row (a step's several tags) until a tag repeats;
a new process always starts a new row. Wall times do not split rows: writers stamp every value
with its own time, and a row's time is that of its first point.

Processes. A ``process_start`` event (``step`` = first logged step - 1) is emitted for each group
of overlapping files (a writer per process) and for each ``SessionLog`` START inside a file
(``purge_step``); a later file of the same process (same host and pid in a ``torch``-style name,
higher writer number) continues it. No ``process_exit`` is emitted: an event file does not say
how or when its writer stopped, and the service takes each process's end step and time from its
last row.

Tags whose name starts with ``eval``, ``val``, ``validation`` (or ``test``) and ``/`` or ``_``
go to the eval table as ``eval/<rest>`` (``eval/test/<rest>``). Files of ``add_hparams`` (only
``hparams`` summaries and one step of metrics) are not series: their metrics go to the config.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import PurePosixPath

import numpy as np

from app.ingest.context import ReadContext
from app.ingest.errors import IngestError
from app.ingest.numbers import INT64, digits
from app.ingest.records import EventRecord, MetricTable, ParsedRun
from app.ingest.source import SourceTree
from app.ingest.tf_events import EventDecoder, ScalarLog, TagTable
from app.ingest.tfrecord import RecordReader

FORMAT = "tensorboard"
VERIFY_DATA_CRC = True
_EVAL = re.compile(r"^(eval|val|validation|test)[/_](.+)$", re.IGNORECASE)
_NAME_TIME = re.compile(r"tfevents\.(\d+)")
_WRITER = re.compile(r"tfevents\.\d+\.(.+)\.(\d+)\.(\d+)(?:\.v2)?$")
_DIGITS = re.compile(r"(\d+)")


def is_event_file(path: str) -> bool:
    return "tfevents" in path.rsplit("/", 1)[-1]


def _folder(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


def _common_folder(folders: Iterable[str]) -> str:
    parts = [PurePosixPath(f).parts for f in folders]
    common: list[str] = []
    for level in zip(*parts, strict=False):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    return "/".join(common)


@dataclass
class EventFile:
    """One file's points (numpy, in record order) and what orders it among the others."""

    path: str
    folder: str  # relative to the run's folder
    steps: np.ndarray
    times: np.ndarray
    tags: np.ndarray  # tag ids; column ids once the columns are named
    values: np.ndarray
    marks: list[tuple[int, int, float]]  # (point, step, time) of SessionLog STARTs
    first_time: float
    last_time: float
    name_time: float
    writer: tuple[str, int, int] | None  # (host, pid, writer number) from a torch/TF2 name


@dataclass
class Boundary:
    """A process start: at ``point`` of the merged order."""

    point: int
    time: float
    file: str
    purge_step: int | None = None


@dataclass
class Merged:
    steps: list[np.ndarray] = field(default_factory=list)
    times: list[np.ndarray] = field(default_factory=list)
    columns: list[np.ndarray] = field(default_factory=list)
    values: list[np.ndarray] = field(default_factory=list)
    boundaries: list[Boundary] = field(default_factory=list)
    size: int = 0


class TensorBoardReader:
    name = FORMAT

    def detect(self, tree: SourceTree) -> str | None:
        folders = {_folder(f) for f in tree.files() if is_event_file(f)}
        return _common_folder(folders) if folders else None

    def read(self, ctx: ReadContext, root: str) -> ParsedRun:
        prefix = f"{root}/" if root else ""
        paths = [f for f in ctx.tree.files() if is_event_file(f) and f.startswith(prefix)]
        tags = TagTable()
        decoder = EventDecoder(tags)
        logs = [(path, self._read_file(ctx, path, decoder)) for path in paths]
        return _Assembly(ctx, root, tags).run(logs)

    def _read_file(self, ctx: ReadContext, path: str, decoder: EventDecoder) -> ScalarLog:
        log = ScalarLog()
        with ctx.open(path) as stream:
            records = RecordReader(stream, path, verify_data=VERIFY_DATA_CRC, on_bytes=ctx.on_bytes)
            for block in records.blocks():
                decoder.decode(block, log, path)
        if records.truncated:
            ctx.warnings.add(
                f"{path}: {records.truncated}; the {log.records} records before it are kept",
                kind="tensorboard-truncated",
            )
        return log


reader = TensorBoardReader()


class _Assembly:
    """Orders the files' points into one metric table and one eval table, with process starts."""

    def __init__(self, ctx: ReadContext, root: str, tags: TagTable) -> None:
        self.ctx = ctx
        self.root = root
        self.tags = tags
        self.config: dict[str, object] = {}

    def run(self, logs: list[tuple[str, ScalarLog]]) -> ParsedRun:
        keep = self._kept_tags()
        files = [f for path, log in logs if (f := self._file(path, log, keep)) is not None]
        sessions = _sessions(files)
        folders = {f.folder for f in files}
        prefixed = any(len({f.folder for f in s}) > 1 for s in sessions)
        if len(folders) > 1 and not prefixed:
            listed = ", ".join(sorted(folders)[:3]) + (", ..." if len(folders) > 3 else "")
            self.ctx.warnings.add(
                f"{len(folders)} folders of event files were written one after another"
                f" ({listed}): read as consecutive launches of one run",
                kind="tensorboard-folders",
            )
        names = self._column_names(files, prefixed)
        merged = _merge(sessions)
        if merged.size == 0:
            raise IngestError(
                f"no scalar values in {len(logs)} event file(s)",
                file=self.root or self.ctx.tree.name,
            )
        steps = np.concatenate(merged.steps)
        times = np.concatenate(merged.times)
        columns = np.concatenate(merged.columns)
        values = np.concatenate(merged.values)
        starts = np.bincount([b.point for b in merged.boundaries], minlength=steps.size)
        segment = np.cumsum(starts) - 1
        table_of = np.asarray([_is_eval(n) for n in names], dtype=bool)
        is_eval = table_of[columns]
        metrics = self._table(names, steps, times, columns, values, segment, ~is_eval, False)
        evals = None
        if is_eval.any():
            evals = self._table(names, steps, times, columns, values, segment, is_eval, True)
        events = _process_starts(merged.boundaries, steps, is_eval)
        return ParsedRun(
            source_format=FORMAT, metrics=metrics, evals=evals, events=events, config=self.config
        )

    def _kept_tags(self) -> np.ndarray:
        """Which tag ids are scalars: simple values, and tensors of the ``scalars`` plugin."""
        keep = np.ones(len(self.tags.names), dtype=bool)
        for i, (name, tensor) in enumerate(zip(self.tags.names, self.tags.tensor, strict=True)):
            if tensor and self.tags.plugins.get(name) != "scalars":
                keep[i] = False
        return keep

    def _file(self, path: str, log: ScalarLog, keep: np.ndarray) -> EventFile | None:
        steps, times, tags, values = log.arrays()
        mask = keep[tags] if tags.size else np.zeros(0, dtype=bool)
        skipped = sorted({self.tags.names[t] for t in np.unique(tags[~mask]).tolist()})
        if skipped:
            self.ctx.warnings.add(
                f"{path}: one-element tensors of {', '.join(skipped[:3])} skipped (their tags"
                " are not marked as scalars)",
                kind="tensorboard-tensors",
            )
        negative = mask & (steps < 0)
        if negative.any():
            self.ctx.warnings.add(
                f"{path}: {int(negative.sum())} points with a negative step skipped",
                kind="tensorboard-negative-step",
            )
            mask &= ~negative
        if log.hparams and np.unique(steps[mask]).size <= 1:
            metrics = self.config.setdefault("hparam_metrics", {})
            assert isinstance(metrics, dict)
            for t, v in zip(tags[mask].tolist(), values[mask].tolist(), strict=True):
                metrics[self.tags.names[t]] = v
            return None
        if not mask.any():
            return None
        kept_before = np.concatenate(([0], np.cumsum(mask)))
        name = path.rsplit("/", 1)[-1]
        found = _NAME_TIME.search(name)
        return EventFile(
            path=path,
            folder=_folder(path)[len(self.root) :].lstrip("/"),
            steps=steps[mask],
            times=np.where(np.isfinite(times[mask]), times[mask], np.nan),  # NaN: no time
            tags=tags[mask],
            values=values[mask],
            marks=[(int(kept_before[m.point]), m.step, _finite(m.time)) for m in log.marks],
            first_time=_finite(log.first_time),
            last_time=_finite(log.last_time),
            name_time=float(found.group(1)) if found else log.first_time,
            writer=_writer(name),
        )

    def _column_names(self, files: list[EventFile], prefixed: bool) -> list[str]:
        """Name of each (folder, tag) column; files' tag arrays are rewritten to column ids."""
        ids: dict[tuple[str, int], int] = {}
        names: list[str] = []
        for f in files:
            folder = f.folder if prefixed else ""
            lookup = np.full(len(self.tags.names), -1, dtype=np.int64)
            for t in np.unique(f.tags).tolist():
                key = (folder, t)
                if key not in ids:
                    ids[key] = len(names)
                    tag = self.tags.names[t]
                    names.append(f"{folder}/{tag}" if folder else tag)
                lookup[t] = ids[key]
            f.tags = lookup[f.tags]
        return names

    def _table(
        self,
        names: list[str],
        steps: np.ndarray,
        times: np.ndarray,
        columns: np.ndarray,
        values: np.ndarray,
        segment: np.ndarray,
        mask: np.ndarray,
        evals: bool,
    ) -> MetricTable:
        steps, times, columns, values, segment = (
            a[mask] for a in (steps, times, columns, values, segment)
        )
        row = _rows(steps, segment, columns)
        first = np.ones(row.size, dtype=bool)
        first[1:] = row[1:] != row[:-1]
        table = MetricTable(steps=steps[first], times=times[first])
        keys = [_eval_key(n) if evals else self.ctx.aliases.canonical(n) for n in names]
        key_ids: dict[str, int] = {}
        key_of_column = np.asarray([key_ids.setdefault(k, len(key_ids)) for k in keys])
        key_names = list(key_ids)
        point_key = key_of_column[columns] if columns.size else columns
        order = np.argsort(point_key, kind="stable")
        bounds = np.flatnonzero(np.diff(point_key[order])) + 1
        for group in sorted(np.split(order, bounds), key=lambda g: int(g[0]) if g.size else 0):
            if group.size == 0:
                continue
            key = key_names[int(point_key[group[0]])]
            rows, vals = row[group], values[group]
            once = np.ones(rows.size, dtype=bool)
            once[1:] = rows[1:] != rows[:-1]  # two tags of one key in a row: keep the first
            table.columns[key] = (rows[once], vals[once])
            table.source_keys[key] = names[int(columns[group[0]])]
            self._warn_non_finite(key, table.source_keys[key], steps[group], vals)
        return table

    def _warn_non_finite(self, key: str, tag: str, steps: np.ndarray, values: np.ndarray) -> None:
        bad = ~np.isfinite(values)
        if bad.any():
            first = int(np.argmax(bad))
            self.ctx.warnings.add(
                f"{self.root or self.ctx.tree.name}: {int(bad.sum())} non-finite value(s) of"
                f" '{tag}' kept (first at step {int(steps[first])}: {values[first]})",
                kind=f"tensorboard-non-finite:{key}",
            )


def _finite(wall_time: float) -> float:
    """A wall time, NaN when the writer stored none that is finite."""
    return wall_time if math.isfinite(wall_time) else math.nan


def _writer(name: str) -> tuple[str, int, int] | None:
    """(host, pid, writer number) from a torch/TF2 event file name."""
    found = _WRITER.search(name)
    if found is None:
        return None
    pid, number = digits(found.group(2), below=INT64), digits(found.group(3), below=INT64)
    return None if pid is None or number is None else (found.group(1), pid, number)


def _is_eval(name: str) -> bool:
    return _EVAL.match(name) is not None


def _eval_key(name: str) -> str:
    found = _EVAL.match(name)
    if found is None:
        return name
    kind, rest = found.group(1).lower(), found.group(2)
    return f"eval/test/{rest}" if kind == "test" else f"eval/{rest}"


def _file_order(f: EventFile) -> tuple[float, float, list[object]]:
    parts = _DIGITS.split(f.path)  # digits compare as numbers, of any length
    natural = [(len(p.lstrip("0")), p) if i % 2 else p for i, p in enumerate(parts)]
    return (f.name_time, f.first_time, natural)


def _sessions(files: list[EventFile]) -> list[list[EventFile]]:
    """Files grouped by process: overlapping in time, or a later writer of the same process."""
    sessions: list[list[EventFile]] = []
    end = -np.inf
    for f in sorted(files, key=_file_order):
        if sessions and (f.first_time <= end or _same_process(sessions[-1], f)):
            sessions[-1].append(f)
        else:
            sessions.append([f])
        end = max(end, f.last_time)
    return sessions


def _same_process(session: list[EventFile], f: EventFile) -> bool:
    if f.writer is None:
        return False
    host, pid, number = f.writer
    return any(
        g.writer is not None and g.writer[:2] == (host, pid) and g.writer[2] < number
        for g in session
    )


def _merge(sessions: list[list[EventFile]]) -> Merged:
    """All points in process order; within a process, concurrent files interleave by time."""
    merged = Merged()
    for files in sessions:
        start = merged.size
        if len(files) == 1:
            order = np.arange(files[0].steps.size)
        else:
            running = [np.fmax.accumulate(np.nan_to_num(f.times, nan=-np.inf)) for f in files]
            which = np.concatenate([np.full(f.steps.size, i) for i, f in enumerate(files)])
            order = np.lexsort((which, np.concatenate(running)))
        merged.steps.append(np.concatenate([f.steps for f in files])[order])
        merged.times.append(np.concatenate([f.times for f in files])[order])
        merged.columns.append(np.concatenate([f.tags for f in files])[order])
        merged.values.append(np.concatenate([f.values for f in files])[order])
        merged.boundaries.append(Boundary(start, min(f.first_time for f in files), files[0].path))
        position = np.empty(order.size, dtype=np.int64)
        position[order] = np.arange(order.size)
        offset = 0
        marks: list[tuple[int, int, float, str]] = []
        for f in files:
            marks.extend(
                (start + int(position[offset + point]), step, when, f.path)
                for point, step, when in f.marks
                if point < f.steps.size  # a START with no points after it changes nothing
            )
            offset += f.steps.size
        for at, step, when, path in sorted(marks):
            last = merged.boundaries[-1]
            if last.point == at:
                last.purge_step = step
            else:
                merged.boundaries.append(Boundary(at, when, path, step))
        merged.size += order.size
    return merged


def _rows(steps: np.ndarray, segment: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """Row index of each point: a new row where the step or process changes or a tag repeats."""
    n = steps.size
    new = np.ones(n, dtype=bool)
    new[1:] = (steps[1:] != steps[:-1]) | (segment[1:] != segment[:-1])
    group = np.cumsum(new) - 1
    width = int(columns.max()) + 1 if n else 1
    keyed = group * width + columns
    order = np.argsort(keyed, kind="stable")
    repeat = order[1:][keyed[order][1:] == keyed[order][:-1]]
    if repeat.size:
        starts = [*np.flatnonzero(new).tolist(), n]
        for g in np.unique(group[repeat]).tolist():
            seen: set[int] = set()
            for i in range(starts[g], starts[g + 1]):
                c = int(columns[i])
                if c in seen:
                    new[i] = True
                    seen = set()
                seen.add(c)
        group = np.cumsum(new) - 1
    return group


def _process_starts(
    boundaries: list[Boundary], steps: np.ndarray, is_eval: np.ndarray
) -> list[EventRecord]:
    """A ``process_start`` per boundary, at the first training step after it, minus one."""
    train = np.flatnonzero(~is_eval)
    points = [b.point for b in boundaries] + [steps.size]
    events = []
    for k, b in enumerate(boundaries):
        j = int(np.searchsorted(train, b.point))
        first = train[j] if j < train.size and train[j] < points[k + 1] else b.point
        payload: dict[str, object] = {"resumed_from": None, "file": b.file}
        if b.purge_step is not None:
            payload["purge_step"] = b.purge_step
        step = max(int(steps[first]) - 1, 0)
        when = b.time if math.isfinite(b.time) else None
        events.append(EventRecord(kind="process_start", step=step, time=when, payload=payload))
    return events

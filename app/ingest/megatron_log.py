"""Megatron-LM / Megatron-DeepSpeed text logs, line by line: metric rows, evaluations and events.

Log lines::

    [2025-05-09 06:11:17] iteration   10/ 1000 | consumed samples: 40 | elapsed time per
      iteration (ms): 3171.3 | learning rate: 1.0E-04 | global batch size: 4 | lm loss: 8.1E+00 |
      loss scale: 16384.0 | grad norm: 3.767 | number of skipped iterations: 0 | ... |
    validation loss at iteration 100 | lm loss value: 8.09E+00 | lm loss PPL: 3.28E+03 |
    saving checkpoint at iteration 33241 to <save>
    successfully saved checkpoint at iteration 33241 to <save>
    loading checkpoint from <load> at iteration 100
    [exiting program after 1190.0 minutes] datetime: 2021-08-08 01:00:51

Iteration N means N optimizer steps done, so it is the step. Fields a line lacks (``lm loss`` and
``grad norm`` on skipped or NaN iterations, ``loss scale`` under bf16) are simply absent; the
iteration time becomes ``iteration_time`` in seconds whatever its unit. Launcher prefixes
(``[default7]: ``) and ``[date time]`` stamps (read as UTC) are stripped, lines that two ranks
wrote into one are split, and a line another rank printed for the same iteration is dropped.
Restarts log iterations again (the step goes back); save, load and exit lines become events, and
once a log has any of them (or is split over several files) every process gets its start.
"""

from __future__ import annotations

import calendar
import itertools
import math
import re
import statistics
import time
from bisect import bisect_left, insort
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.ingest.context import ReadContext
from app.ingest.jsonl import iter_lines
from app.ingest.numbers import INT32, INT64, digits, whole
from app.ingest.records import EventRecord, MetricTable

_ITER = re.compile(r"iteration\s+(\d+)\s*/\s*(\d+)\s*\|")
_RANK = re.compile(r"\[([A-Za-z_]*\d+)\]:\s*$")
_STAMP = re.compile(r"\[(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:[.,]\d+)?\]")
_DATETIME = re.compile(r"datetime:\s*(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})")
_VALID = re.compile(r"validation loss at iteration\s+(\d+)[^|]*\|")
_SAVE_END = re.compile(r"successfully saved checkpoint (?:at|from) iteration\s+(\d+)\s+to\s+(\S+)")
_SAVE_START = re.compile(r"saving checkpoint at iteration\s+(\d+)\s+to\s+(\S+)")
_LOAD = re.compile(
    r"(?:loading|successfully loaded) checkpoint from\s+(\S+).*?\bat iteration\s+(\d+)"
)
_FRESH = re.compile(r"will not load any checkpoints")
_EXITS = (
    (re.compile(r"exiting program at iteration\s+(\d+)"), "exit_interval"),
    (re.compile(r"exiting program after receiving SIG"), "signal"),
    (re.compile(r"\[exiting program after\s+[\d.]+\s+minutes\]"), "time_limit"),
    (re.compile(r"\[after training is done\]"), "finished"),
    (re.compile(r"received SIGTERM|CANCELLED AT|Job step aborted"), "killed"),
)
_KEYWORDS = ("iteration", "checkpoint", "exiting", "training is done", "SIG", "CANCELLED", "abort")
_TIME_KEY = re.compile(r"elapsed time per iteration \((ms|s)\)")


@dataclass
class _Rows:
    steps: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    columns: dict[str, tuple[list[int], list[float]]] = field(default_factory=dict)
    source_keys: dict[str, str] = field(default_factory=dict)

    def add(self, step: int, when: float, values: list[tuple[str, str, float]]) -> None:
        row = len(self.steps)
        self.steps.append(step)
        self.times.append(when)
        for canonical, source, value in values:
            column = self.columns.setdefault(canonical, ([], []))
            if column[0] and column[0][-1] == row:
                continue  # two aliases of one metric on one line: keep the first
            self.source_keys.setdefault(canonical, source)
            column[0].append(row)
            column[1].append(value)

    def table(self) -> MetricTable:
        out = MetricTable(
            steps=np.asarray(self.steps, dtype=np.int64),
            times=np.asarray(self.times, dtype=np.float64),
            source_keys=self.source_keys,
        )
        for key, (rows, values) in self.columns.items():
            out.columns[key] = (np.asarray(rows, dtype=np.int64), np.asarray(values, np.float64))
        return out


@dataclass
class _Process:
    rows: int = 0
    last_step: int | None = None
    last_save: int | None = None
    exited: bool = False
    last_row: tuple[int, int | None, str | None] | None = None  # step, consumed, rank tag


class LogParser:
    """Rows, evaluations and events of the logs, fed one file after another."""

    def __init__(self, ctx: ReadContext, saved: dict[int, str]) -> None:
        self.ctx = ctx
        self.names = dict(saved)  # checkpoint name by iteration
        self.train = _Rows()
        self.evals = _Rows()
        self.events: list[EventRecord] = []
        self.config: dict[str, Any] = {}
        self.batch_sizes: set[int] = set()
        self.consumed: dict[int, tuple[int, int | None]] = {}  # step -> (consumed, batch)
        self.saves: dict[int, tuple[float | None, float | None]] = {}  # step -> start/end times
        self.completed: set[int] = set()  # saves the log reports finished
        self.save_steps = sorted(self.names)  # of checkpoints in the tree or reported saved
        self._consumed_lookup: tuple[int, list[int], float] | None = None
        self.process = _Process()
        self.marked = False  # a start, load or exit line, or more than one file
        self.started = False
        self.start_step: int | None = None
        self.rows_before_start = False
        self.new_process = False

    def feed(self, path: str, *, first: bool) -> None:
        if not first:
            self.marked = True
            self.new_process = True
        with self.ctx.open(path) as stream:
            for lineno, raw, _ in iter_lines(
                stream, path, max_line_bytes=self.ctx.max_line_bytes, on_bytes=self.ctx.on_bytes
            ):
                line = raw.decode("utf-8", "replace").rstrip("\r")
                if any(word in line for word in _KEYWORDS):
                    self._line(line, path, lineno)

    def _line(self, line: str, path: str, lineno: int) -> None:
        matches = list(_ITER.finditer(line))
        if matches:
            for k, match in enumerate(matches):
                before = line[matches[k - 1].end() if k else 0 : match.start()]
                stop = matches[k + 1].start() if k + 1 < len(matches) else len(line)
                self._iteration(match, line[match.end() : stop], before, path, lineno)
            return
        if (valid := _VALID.search(line)) is not None:
            step = self._step(valid.group(1), path, lineno)
            if step is None:
                return
            values = self._fields(line[valid.end() :], path, lineno, evaluation=True)
            self.evals.add(step, _stamp(line), values)
            return
        if (end := _SAVE_END.search(line)) is not None:
            step = self._step(end.group(1), path, lineno)
            if step is None:
                return
            when = _stamp(line)
            start = self.saves.get(step, (None, None))[0]
            self.saves[step] = (start, None if math.isnan(when) else when)
            if step not in self.completed and step not in self.names:
                insort(self.save_steps, step)
            self.completed.add(step)
            self.process.last_save = step
            self._event("checkpoint_save_end", step, when, {"path": end.group(2)}, lineno)
            return
        if (begin := _SAVE_START.search(line)) is not None:
            step = self._step(begin.group(1), path, lineno)
            if step is None:
                return
            when = _stamp(line)
            self.saves[step] = (None if math.isnan(when) else when, None)
            self._event("checkpoint_save_start", step, when, {"path": begin.group(2)}, lineno)
            return
        if (load := _LOAD.search(line)) is not None:
            step = self._step(load.group(2), path, lineno)
            if step is None:
                return
            resumed = f"{load.group(1).rstrip('/')}/{self._name(step)}"
            self._start(step, resumed, _stamp(line), lineno, explicit=True)
            return
        if _FRESH.search(line):
            self._start(0, None, _stamp(line), lineno, explicit=True)
            return
        self._exit_line(line, path, lineno)

    def _step(self, text: str, path: str, lineno: int) -> int | None:
        """The iteration a line names; None (and a warning) for one too large to be a step."""
        step = digits(text)
        if step is None:
            self.ctx.warnings.add(
                f"{path} line {lineno}: iteration {text[:24]} is out of range; line skipped",
                kind=f"{path}:iteration-range",
            )
        return step

    def _iteration(
        self, match: re.Match[str], text: str, before: str, path: str, lineno: int
    ) -> None:
        step = self._step(match.group(1), path, lineno)
        if step is None:
            return
        total = digits(match.group(2), below=INT64)
        values = self._fields(text, path, lineno, evaluation=False)
        consumed = next((whole(v) for c, _, v in values if c == "consumed_samples"), None)
        batches = (v for _, s, v in values if s == "global batch size")
        batch = next((whole(v, low=1, below=INT32) for v in batches), None)
        rank = _RANK.search(before)
        tag = rank.group(1) if rank else None
        last = self.process.last_row
        if tag and last and last[:2] == (step, consumed) and last[2] and last[2] != tag:
            return  # the iteration just logged, printed by a second rank
        went_back = self.process.last_step is not None and step <= self.process.last_step
        if self.new_process or self.process.exited or went_back:
            self._start(self._resume_point(step), None, math.nan, lineno, explicit=False)
        if not self.started:
            self.rows_before_start = True
        self.process.last_row = (step, consumed, tag)
        self.process.rows += 1
        self.process.last_step = step
        self.train.add(step, _stamp(before), values)
        self.config["train_iters"] = total
        if consumed is not None:
            self.consumed[step] = (consumed, batch)
        if batch is not None:
            self.batch_sizes.add(batch)

    def _fields(
        self, text: str, path: str, lineno: int, *, evaluation: bool
    ) -> list[tuple[str, str, float]]:
        out: list[tuple[str, str, float]] = []
        for part in text.split("|"):
            key, sep, raw = part.partition(":")
            key, raw = key.strip(), raw.strip()
            if not key:
                continue
            if not sep or "[" in key:
                break  # another line glued on after this one's last field
            try:
                value = float(raw)
            except ValueError:
                self.ctx.warnings.add(
                    f"{path} line {lineno}: '{key}' is not a number ({raw[:30]!r}); not stored",
                    kind=f"{path}:{key}:type",
                )
                continue
            if evaluation:
                bare = key.removesuffix(" value")
                name = bare.removesuffix(" PPL")
                canonical = "eval/" + self.ctx.aliases.canonical(name)
                canonical += "_ppl" if bare.endswith(" PPL") else ""
            elif (unit := _TIME_KEY.fullmatch(key)) is not None:
                canonical = "iteration_time"
                value = value / 1000 if unit.group(1) == "ms" else value
            else:
                canonical = self.ctx.aliases.canonical(key)
            out.append((canonical, key, value))
        return out

    def _exit_line(self, line: str, path: str, lineno: int) -> None:
        for pattern, reason in _EXITS:
            found = pattern.search(line)
            if found is None:
                continue
            step = self._step(found.group(1), path, lineno) if found.groups() else None
            self.marked = True
            if self.process.exited:
                return
            if step is None:
                done = (self.process.last_step, self.process.last_save)
                step = max((s for s in done if s is not None), default=None)
            self.process.exited = True
            self._event("process_exit", step, _stamp(line), {"reason": reason}, lineno)
            return

    def _start(
        self, step: int | None, resumed: str | None, when: float, lineno: int, *, explicit: bool
    ) -> None:
        self.marked = self.marked or explicit
        idle = self.started and self.process.rows == 0 and not self.process.exited
        if explicit and idle and self.start_step == step:
            return  # "loading checkpoint ..." then "successfully loaded checkpoint ..."
        if resumed is None and step is not None and (step in self.names or step in self.completed):
            resumed = self._name(step)
        self._event("process_start", step, when, {"resumed_from": resumed}, lineno)
        self.process = _Process()
        self.started = True
        self.start_step = step
        self.new_process = False

    def _name(self, step: int) -> str:
        return self.names.get(step, f"iter_{step:07d}")

    def _resume_point(self, first_step: int) -> int | None:
        """A restart without a load line resumed from the latest save before its first row."""
        before = bisect_left(self.save_steps, first_step)
        return self.save_steps[before - 1] if before else None

    def _event(
        self, kind: str, step: int | None, when: float, payload: dict[str, Any], lineno: int
    ) -> None:
        time_ = None if math.isnan(when) else when
        self.events.append(EventRecord(kind, step, time_, payload, line=lineno))

    def finish(self) -> list[EventRecord]:
        """The events, with process starts and exits only where the log marks them."""
        lifecycle = ("process_start", "process_exit")
        if not self.marked:
            return [e for e in self.events if e.kind not in lifecycle]
        events = list(self.events)
        first = next((e for e in events if e.kind in lifecycle), None)
        if first is None or first.kind != "process_start" or self.rows_before_start:
            start = EventRecord("process_start", self._first_start(), None, {"resumed_from": None})
            events.insert(0, start)
        return events

    def _interval(self) -> float:
        """The log interval: the typical step between logged lines."""
        steps = self.train.steps
        diffs = [b - a for a, b in itertools.pairwise(steps) if b > a]
        return statistics.median(diffs) if diffs else 1.0

    def _first_start(self) -> int | None:
        steps = self.train.steps
        return 0 if steps and steps[0] <= self._interval() else None

    def consumed_at(self, step: int) -> int | None:
        """Consumed samples at ``step``: logged, or the line before plus the iterations between
        at its global batch size when the save fell within one log interval after it."""
        if step in self.consumed:
            return self.consumed[step][0]
        if self._consumed_lookup is None or self._consumed_lookup[0] != len(self.consumed):
            # sorted once, not searched per checkpoint: a log may report thousands of saves
            self._consumed_lookup = (len(self.consumed), sorted(self.consumed), self._interval())
        _, logged, interval = self._consumed_lookup
        at = bisect_left(logged, step)
        before = logged[at - 1] if at else None
        if before is None or step - before > interval:
            return None
        consumed, batch = self.consumed[before]
        return None if batch is None else consumed + (step - before) * batch


def _stamp(text: str) -> float:
    """Unix seconds of the first ``[date time]`` or ``datetime:`` stamp in ``text`` (as UTC)."""
    found = _STAMP.search(text) or _DATETIME.search(text)
    if found is None:
        return math.nan
    try:
        parsed = time.strptime(f"{found.group(1)} {found.group(2)}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return math.nan
    return float(calendar.timegm(parsed))

"""One W&B transaction log (``run-<id>.wandb``) decoded: :func:`decode_log` turns it into history
rows, the last summary, config changes, system samples and the run's start and exit.

Pure Python and numpy (plus orjson and pandas' hash table), no protobuf or wandb at run time.
:mod:`app.ingest.wandb_framing` checks the chunks and yields batches of whole records;
:mod:`app.ingest.wandb_proto` finds the fields of all messages of a batch at once. Only the
fields the reader needs are named; everything else is skipped by wire type:

    Record:          history 2, summary 3, config 5, stats 7, run 17, exit 18
    HistoryRecord:   item 1 (HistoryItem), step 2 (num 1)
    SummaryRecord, ConfigRecord:  update 1, remove 2
    StatsRecord:     timestamp 2, item 3
    RunRecord:       run_id 1, config 4, starting_step 14, start_time 17, resumed 18, resume 24
    RunExitRecord:   exit_code 1

(the item and ``Timestamp`` layouts are in :mod:`app.ingest.wandb_proto`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

import numpy as np

from app.ingest.errors import IngestError, Warnings
from app.ingest.wandb_framing import HEADER as HEADER  # re-exported for callers of this module
from app.ingest.wandb_framing import RecordBatch, iter_batches
from app.ingest.wandb_proto import (
    Fields,
    WireError,
    fields,
    group_spans,
    in_file_order,
    item_parts,
    item_spans,
    parse_numbers,
    signed,
    timestamp,
    varints,
    walk,
)

WINDOW_BLOCKS = 512  # 16 MiB read and framed at a time
HISTORY, SUMMARY, CONFIG, STATS, RUN, EXIT = 2, 3, 5, 7, 17, 18

NUMBER, MISSING, OTHER = 0, 1, 2  # what an item's value is; MISSING: none, or JSON null
_NUMERIC_START = np.zeros(256, dtype=bool)
_NUMERIC_START[list(b"-0123456789NI")] = True  # JSON numbers, NaN, Infinity, -Infinity


class KeyTable:
    """Item keys by the bytes that encode them (an item without its value), so a key is decoded
    once, not once per logged value. Codes are shared by all logs of a run."""

    def __init__(self) -> None:
        self.codes: dict[bytes, int] = {}
        self.names: list[str] = []

    def encode(self, encoded: list[bytes]) -> np.ndarray:
        codes = self.codes
        for raw in dict.fromkeys(encoded):
            if raw not in codes:
                codes[raw] = len(self.names)
                self.names.append("/".join(item_parts(raw)[0]))
        return np.fromiter(map(codes.__getitem__, encoded), dtype=np.int64, count=len(encoded))

    def find(self, name: str) -> np.ndarray:
        return np.asarray([c for c, n in enumerate(self.names) if n == name], dtype=np.int64)


@dataclass
class Items:
    """The items of history rows: row, key code, value (NaN unless a number) and value class."""

    row: np.ndarray
    code: np.ndarray
    value: np.ndarray
    kind: np.ndarray  # NUMBER, MISSING or OTHER
    first_byte: np.ndarray  # of the value's JSON text: says what a non-number is

    @staticmethod
    def concat(parts: list[Items], shifts: list[int]) -> Items:
        """The items of several logs, their rows shifted by ``shifts``."""
        if not parts:
            empty = np.zeros(0, dtype=np.int64)
            return Items(empty, empty, np.zeros(0), np.zeros(0, np.int8), np.zeros(0, np.uint8))
        return Items(
            np.concatenate([p.row + shift for p, shift in zip(parts, shifts, strict=True)]),
            np.concatenate([p.code for p in parts]),
            np.concatenate([p.value for p in parts]),
            np.concatenate([p.kind for p in parts]),
            np.concatenate([p.first_byte for p in parts]),
        )

    def take(self, mask: np.ndarray) -> Items:
        return Items(
            self.row[mask],
            self.code[mask],
            self.value[mask],
            self.kind[mask],
            self.first_byte[mask],
        )


@dataclass
class Sample:
    """A system-metrics sample and the history row logged before it (-1: none yet)."""

    row: int
    time: float | None
    values: list[tuple[str, bytes | None]]


@dataclass
class LogData:
    path: str
    run_id: str | None = None
    start_time: float | None = None
    starting_step: int = 0
    resumed: bool = False
    exit_code: int | None = None  # None: no exit record
    rows: int = 0
    steps: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    times: np.ndarray = field(default_factory=lambda: np.zeros(0))
    items: Items | None = None
    samples: list[Sample] = field(default_factory=list)
    config_ops: list[tuple[bool, list[str], bytes | None]] = field(default_factory=list)
    summary: dict[int, bytes | None] = field(default_factory=dict)  # key code -> last value


def decode_log(
    stream: IO[bytes],
    path: str,
    warnings: Warnings,
    keys: KeyTable,
    *,
    on_bytes: Callable[[int], None] | None = None,
) -> LogData:
    """Everything the reader takes from one ``run-<id>.wandb``."""
    decoder = _Decoder(path, keys)
    batches = iter_batches(stream, path, warnings, window_blocks=WINDOW_BLOCKS, on_bytes=on_bytes)
    for batch in batches:
        decoder.batch(batch)
    return decoder.finish()


class _Decoder:
    def __init__(self, path: str, keys: KeyTable) -> None:
        self.path = path
        self.keys = keys
        self.data = LogData(path)
        self.items: list[Items] = []
        self.step_fields: list[np.ndarray] = []  # HistoryRecord.step of each row, -1 if unset
        self.row_records: list[np.ndarray] = []  # record number of each row

    def batch(self, batch: RecordBatch) -> None:
        buf = batch.array
        wanted = (HISTORY, SUMMARY, CONFIG, STATS, RUN, EXIT)
        top = self._walk(batch, batch.starts, batch.ends, None, wanted)
        kind = np.zeros(batch.starts.size, dtype=np.int64)
        body_start = np.zeros(batch.starts.size, dtype=np.int64)
        body_end = np.zeros(batch.starts.size, dtype=np.int64)
        for number in wanted:
            sel = top.select(number)
            kind[sel.owner], body_start[sel.owner], body_end[sel.owner] = number, sel.start, sel.end
        history = np.flatnonzero(kind == HISTORY)
        rows_before = self.data.rows
        if history.size:
            self._history(batch, buf, history, body_start[history], body_end[history])
        summary = np.flatnonzero(kind == SUMMARY)
        if summary.size:
            self._summary(batch, summary, body_start[summary], body_end[summary])
        for index in np.flatnonzero(np.isin(kind, (CONFIG, STATS, RUN, EXIT))).tolist():
            body = batch.data[int(body_start[index]) : int(body_end[index])]
            row = rows_before + int(np.searchsorted(history, index)) - 1
            try:
                self._rare(int(kind[index]), body, row)
            except WireError as exc:
                raise self._error(batch.first_number + index, str(exc)) from None

    def finish(self) -> LogData:
        data = self.data
        data.items = Items.concat(self.items, [0] * len(self.items))
        steps = np.concatenate(self.step_fields) if self.step_fields else data.steps
        records = np.concatenate(self.row_records) if self.row_records else data.steps
        items = data.items
        stamped = np.isin(items.code, self.keys.find("_timestamp")) & np.isfinite(items.value)
        data.times = np.full(data.rows, np.nan)  # NaN: no time (none logged, or not finite)
        data.times[items.row[stamped]] = items.value[stamped]
        stepped = np.isin(items.code, self.keys.find("_step"))
        values = items.value[stepped]
        bad = (items.kind[stepped] != NUMBER) | ~np.isfinite(values)
        bad |= (values != np.floor(values)) | (values < 0) | (values >= 2.0**62)
        if bad.any():
            row = int(items.row[stepped][int(np.argmax(bad))])
            raise self._error(int(records[row]), "'_step' is not a step number")
        steps[items.row[stepped]] = values.astype(np.int64)
        if (steps < 0).any():
            raise self._error(int(records[int(np.argmax(steps < 0))]), "history row without _step")
        data.steps = steps
        return data

    def _error(self, record: int, message: str) -> IngestError:
        return IngestError(f"record {record}: {message}", file=self.path)

    def _walk(
        self,
        batch: RecordBatch,
        starts: np.ndarray,
        ends: np.ndarray,
        records: np.ndarray | None,
        keep: tuple[int, ...],
    ) -> Fields:
        """Fields of the messages; ``records`` maps a message to its record in the batch."""
        try:
            return walk(batch.array, starts, ends, keep)
        except WireError as exc:
            at = int(exc.args[1])
            record = at if records is None else int(records[at])
            raise self._error(batch.first_number + record, "not a valid W&B record") from None

    def _keyed(
        self, batch: RecordBatch, items: Fields, records: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Key code and value span of each item (``items.owner`` indexes ``records``); the
        span is (-1, -1) for an item without a value."""
        buf, data = batch.array, batch.data
        try:
            key_end, value_start, value_end = item_spans(buf, items.start, items.end)
        except WireError as exc:
            record = batch.first_number + int(records[items.owner[int(exc.args[1])]])
            raise self._error(record, "not a valid W&B record") from None
        group, first = group_spans(buf, items.start, key_end)
        spans = zip(items.start[first].tolist(), key_end[first].tolist(), strict=True)
        code = np.empty(items.owner.size, dtype=np.int64)
        grouped = group >= 0
        after = (value_start >= 0) & (value_end != items.end)  # fields after the value: rare
        alone = np.flatnonzero(~grouped | after)
        try:
            code[grouped] = self.keys.encode([data[a:b] for a, b in spans])[group[grouped]]
            if alone.size:
                start, end = items.start[alone].tolist(), items.end[alone].tolist()
                cut = key_end[alone].tolist()
                resume = np.maximum(value_end, key_end)[alone].tolist()
                spans4 = zip(start, cut, resume, end, strict=True)
                code[alone] = self.keys.encode([data[a:b] + data[c:d] for a, b, c, d in spans4])
        except WireError:  # pragma: no cover - item_spans has checked the key fields
            raise self._error(batch.first_number + int(records[0]), "bad item key") from None
        return code, value_start, value_end

    def _history(
        self,
        batch: RecordBatch,
        buf: np.ndarray,
        records: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
    ) -> None:
        fields = self._walk(batch, starts, ends, records, (1, 2))
        items = in_file_order(fields.select(1))  # memory is read in sequence: faster
        code, value_start, value_end = self._keyed(batch, items, records)
        has_value = value_start >= 0
        first = np.zeros(code.size, dtype=np.uint8)
        first[has_value] = buf[value_start[has_value]]
        kind = np.where(has_value & (first != ord("n")), OTHER, MISSING).astype(np.int8)
        numeric = np.flatnonzero(_NUMERIC_START[first] & has_value)
        value = np.full(code.size, np.nan)
        try:
            value[numeric] = parse_numbers(buf, value_start[numeric], value_end[numeric])
            kind[numeric] = NUMBER
        except ValueError:
            for i in numeric.tolist():  # one by one, to find those that are not numbers
                try:
                    value[i] = float(batch.data[int(value_start[i]) : int(value_end[i])])
                    kind[i] = NUMBER
                except ValueError:
                    first[i] = 0  # reported as malformed
        self.items.append(Items(items.owner + self.data.rows, code, value, kind, first))
        step = np.full(records.size, -1, dtype=np.int64)
        marks = fields.select(2)  # HistoryStep {num 1}
        if marks.owner.size:
            nums = self._walk(batch, marks.start, marks.end, records[marks.owner], (1,))
            nums = nums.select(1, wire=0)
            step[marks.owner[nums.owner]] = varints(buf, nums.start)[0]
        self.step_fields.append(step)
        self.row_records.append(batch.first_number + records)
        self.data.rows += int(records.size)

    def _summary(
        self, batch: RecordBatch, records: np.ndarray, starts: np.ndarray, ends: np.ndarray
    ) -> None:
        """Only the last value of each key is kept (None for a removed key)."""
        fields = self._walk(batch, starts, ends, records, (1, 2))
        ops = in_file_order(fields.select(1), fields.select(2))
        code, value_start, value_end = self._keyed(batch, ops, records)
        if code.size == 0:
            return  # summary records that update nothing
        removed = np.isin(ops.tag, fields.select(2).tag)
        last = np.full(int(code.max()) + 1, -1, dtype=np.int64)
        last[code] = np.arange(code.size)  # the last assignment wins
        for i in last[last >= 0].tolist():
            a, b = int(value_start[i]), int(value_end[i])
            self.data.summary[int(code[i])] = None if removed[i] or a < 0 else batch.data[a:b]

    def _rare(self, kind: int, body: bytes, row: int) -> None:
        """A config, stats, run or exit record; ``row`` is the history row logged before it."""
        data = self.data
        if kind == STATS:
            when: float | None = None
            values: list[tuple[str, bytes | None]] = []
            for number, raw in fields(body):
                if number == 2 and isinstance(raw, bytes):
                    when = timestamp(raw)
                elif number == 3 and isinstance(raw, bytes):
                    key, value = item_parts(raw)
                    values.append(("/".join(key), value))
            data.samples.append(Sample(row, when, values))
        elif kind == CONFIG:
            self._config(body)
        elif kind == EXIT:
            data.exit_code = 0
            for number, raw in fields(body):
                if number == 1 and isinstance(raw, int):
                    data.exit_code = signed(raw)
        elif kind == RUN:
            first = data.run_id is None
            for number, raw in fields(body):
                if number == 4 and isinstance(raw, bytes):
                    self._config(raw)
                elif not first:
                    continue
                elif number == 1 and isinstance(raw, bytes):
                    data.run_id = raw.decode("utf-8", "replace")
                elif number == 17 and isinstance(raw, bytes):
                    data.start_time = timestamp(raw)
                elif number == 14 and isinstance(raw, int):
                    data.starting_step = signed(raw)
                elif number in (18, 24) and raw:
                    data.resumed = True

    def _config(self, body: bytes) -> None:
        for number, raw in fields(body):
            if number in (1, 2) and isinstance(raw, bytes):
                path, value = item_parts(raw)
                self.data.config_ops.append((number == 2, path, value))

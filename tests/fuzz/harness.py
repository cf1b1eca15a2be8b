"""What every fuzz test checks, and how many inputs it tried.

A reader given any bytes either returns a parsed run whose arrays the service can lay out, or
raises :class:`IngestError` with a short message naming a file of the source (and, for a JSON
Lines file, the line). Anything else, or taking longer than :data:`SECONDS_PER_INPUT`, fails the
test with the input's description. Sources are held in memory (:class:`MemoryTree`), so a test
tries hundreds of inputs a second.

``RUNWATCH_FUZZ_EXAMPLES`` (default :data:`CI_EXAMPLES`) is the number of inputs each reader-level
test tries; tests through the service or in child processes try a fixed fraction of it.
"""

from __future__ import annotations

import io
import json
import math
import os
import signal
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np
from hypothesis import HealthCheck, settings

from app.ingest.aliases import AliasTable
from app.ingest.context import ReadContext
from app.ingest.errors import IngestError, Warnings
from app.ingest.formats import read_source
from app.ingest.records import MetricTable, ParsedRun
from app.ingest.source import SourceTree
from app.services import storable
from app.services.run_store import plan_layout

CI_EXAMPLES = 60
SECONDS_PER_INPUT = 10.0
MAX_MESSAGE_CHARS = 1000
LINE_FILES = (".jsonl",)  # errors about these name the line
WHOLE_FILE_ERRORS = ("no metric rows", "could not be read", "bytes; this file is limited")

TRIED: Counter[str] = Counter()  # inputs tried, by reader (printed at the end of the session)
OUTCOMES: Counter[tuple[str, str]] = Counter()  # (reader, "parsed" | "refused")


def examples(fraction: float = 1.0, *, least: int = 3) -> int:
    base = int(os.environ.get("RUNWATCH_FUZZ_EXAMPLES", CI_EXAMPLES))
    return max(least, math.ceil(base * fraction))


def fuzz_settings(fraction: float = 1.0, *, least: int = 3) -> settings:
    """Hypothesis settings of a fuzz test: no example database (nothing written to the checkout),
    no deadline (:func:`time_bound` is the per-input limit), large inputs allowed."""
    return settings(
        max_examples=examples(fraction, least=least),
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
            HealthCheck.filter_too_much,
        ],
    )


class TookTooLong(BaseException):
    """An input ran past its time bound."""


@contextmanager
def time_bound(seconds: float = SECONDS_PER_INPUT) -> Iterator[None]:
    """Interrupt the block after ``seconds`` (SIGALRM; main thread only)."""

    def expire(signum: int, frame: Any) -> None:
        raise TookTooLong(f"more than {seconds} s on one input")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class MemoryTree(SourceTree):
    """A source held in memory: ``{relative path: bytes}`` (or a callable opening a stream)."""

    def __init__(self, name: str, files: dict[str, bytes | tuple[int, Callable[[], IO[bytes]]]]):
        sizes = {p: (v[0] if isinstance(v, tuple) else len(v)) for p, v in files.items()}
        super().__init__(name, sizes)
        self.data = files

    def open(self, path: str) -> IO[bytes]:
        found = self.data[path]
        return found[1]() if isinstance(found, tuple) else io.BytesIO(found)


@dataclass
class Outcome:
    parsed: ParsedRun | None
    error: IngestError | None
    warnings: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return "parsed" if self.parsed is not None else "refused"


def read_files(
    reader: str,
    files: dict[str, bytes],
    *,
    name: str = "upload.tar",
    max_line_bytes: int = 1 << 20,
    seconds: float = SECONDS_PER_INPUT,
) -> Outcome:
    """Read a source the way a job does (format detection, companions, layout) and check the
    property. ``reader`` is the format the input was made for (it names the count)."""
    TRIED[reader] += 1
    tree = MemoryTree(name, files)
    warnings = Warnings()
    ctx = ReadContext(tree, AliasTable(), warnings, max_line_bytes=max_line_bytes)
    try:
        with time_bound(seconds):
            try:
                parsed = read_source(ctx)
                plan_layout(parsed, warnings)
            except IngestError as exc:
                check_error(exc, tree)
                OUTCOMES[reader, "refused"] += 1
                return Outcome(None, exc, warnings.summary())
    except TookTooLong as exc:
        raise AssertionError(f"{reader}: {exc}; files {describe(files)}") from None
    check_parsed(parsed)
    check_messages(warnings.summary())
    OUTCOMES[reader, "parsed"] += 1
    return Outcome(parsed, None, warnings.summary())


def check_error(exc: IngestError, tree: SourceTree) -> None:
    text = str(exc)
    assert exc.message, "an error without a message"
    assert len(text) <= MAX_MESSAGE_CHARS, f"message of {len(text)} characters: {text[:300]}..."
    assert exc.file, f"the error names no file: {text}"
    assert exc.file == tree.name or exc.file in tree.sizes or _folder_of(exc.file, tree), text
    if exc.file.endswith(LINE_FILES) and not exc.message.startswith(WHOLE_FILE_ERRORS):
        assert exc.line is not None and exc.line >= 1, f"no line named: {text}"


def _folder_of(name: str, tree: SourceTree) -> bool:
    prefix = name.rstrip("/") + "/"
    return any(f.startswith(prefix) for f in tree.sizes)


def check_messages(messages: list[str]) -> None:
    for message in messages:
        assert len(message) <= MAX_MESSAGE_CHARS, f"warning of {len(message)} characters"


def check_parsed(parsed: ParsedRun) -> None:
    """What the service relies on when it writes a parsed run."""
    check_table(parsed.metrics)
    if parsed.evals is not None:
        check_table(parsed.evals)
    if parsed.samples is not None:
        trace = parsed.samples
        assert trace.steps.dtype == np.int64 and trace.counts.dtype == np.int64
        assert trace.ids.dtype == np.int64 and trace.steps.size == trace.counts.size
        assert int(trace.counts.sum()) == trace.ids.size
        assert trace.ids.size == 0 or int(trace.ids.min()) >= 0
        assert trace.steps.size == 0 or int(trace.steps.min()) >= 0
    for event in parsed.events:
        assert isinstance(event.kind, str) and event.kind
        check_text(event.kind, storable.EVENT_KIND)
        assert event.step is None or (type(event.step) is int and 0 <= event.step < 2**63)
        assert event.time is None or math.isfinite(event.time)
        check_json(event.payload)
    names = [c.name for c in parsed.checkpoints]
    assert len(set(names)) == len(names), f"checkpoint names repeat: {names}"
    for ckpt in parsed.checkpoints:
        assert type(ckpt.step) is int and 0 <= ckpt.step < 2**63, ckpt.step
        check_text(ckpt.name, storable.CHECKPOINT_NAME)
        for component, record in ckpt.components.items():
            check_text(component, storable.COMPONENT_NAME)
            check_text(record.file or "", storable.COMPONENT_FILE)
        for value in (ckpt.consumed_samples, ckpt.epoch, ckpt.seed, ckpt.dataset_size):
            assert value is None or (type(value) is int and -(2**63) <= value < 2**63), value
        assert ckpt.time_start is None or math.isfinite(ckpt.time_start)
        assert ckpt.time_end is None or math.isfinite(ckpt.time_end)
        check_json(ckpt.manifest)
        if ckpt.data_state is not None:
            check_json(ckpt.data_state)
    check_json(parsed.config)


def check_table(table: MetricTable) -> None:
    n = table.num_rows
    assert table.steps.dtype == np.int64 and table.times.dtype == np.float64
    assert table.times.size == n
    assert n == 0 or int(table.steps.min()) >= 0
    assert not np.isinf(table.times).any()
    for key, (rows, values) in table.columns.items():
        assert isinstance(key, str) and key
        assert key in table.source_keys
        check_text(key, storable.KEY)
        check_text(table.source_keys[key], storable.SOURCE_KEY)
        assert rows.dtype == np.int64 and values.dtype == np.float64, (key, rows.dtype)
        assert rows.size == values.size
        assert rows.size == 0 or (int(rows.min()) >= 0 and int(rows.max()) < n)
        assert rows.size < 2 or bool((np.diff(rows) > 0).all()), f"{key}: rows not increasing"


def check_json(value: Any) -> None:
    """JSON a column takes on both backends: no NaN/Infinity, NUL or lone surrogate."""
    text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    check_text(text)


def check_text(text: str, limit: int | None = None) -> None:
    """Text a column takes on both backends: UTF-8 encodable, no NUL, within its length."""
    text.encode("utf-8")
    assert "\x00" not in text and "\\u0000" not in text, f"NUL in {text[:80]!r}"
    assert limit is None or len(text) <= limit, f"{len(text)} characters: {text[:80]!r}"


def describe(files: dict[str, bytes]) -> str:
    return ", ".join(f"{p} ({len(v)} bytes: {v[:80]!r})" for p, v in files.items())


def report() -> list[str]:
    lines = []
    for reader in sorted(TRIED):
        parsed, refused = OUTCOMES[reader, "parsed"], OUTCOMES[reader, "refused"]
        lines.append(f"{reader}: {TRIED[reader]} inputs ({parsed} parsed, {refused} refused)")
    return lines

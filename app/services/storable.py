"""A parsed run made to fit its columns before it is laid out and written.

Readers keep what a source says; the database has limits a source does not know: text of a
bounded length with no NUL character or lone surrogate (PostgreSQL refuses NUL, and neither
backend can encode a lone surrogate), JSON without NaN or infinities (PostgreSQL refuses them)
and not nested past what a JSON encoder recurses through, integers in their column's range, one
series per metric key of a run, one checkpoint per name. What does not fit is changed or left
out with a warning; nothing here fails a job.
"""

from __future__ import annotations

import math
from typing import Any

from app.ingest.errors import Warnings, printable
from app.ingest.records import CheckpointRecord, EventRecord, MetricTable, ParsedRun
from app.models import Checkpoint, CheckpointComponent, Event, MetricSeries, Run, Segment

MAX_JSON_DEPTH = 64
TOO_DEEP = f"<nested more than {MAX_JSON_DEPTH} levels; not stored>"
INT64 = 2**63
INT32 = 2**31


def _length(column: Any) -> int:
    return int(column.type.length)


KEY = _length(MetricSeries.__table__.c.key)
SOURCE_KEY = _length(MetricSeries.__table__.c.source_key)
CHECKPOINT_NAME = _length(Checkpoint.__table__.c.name)
COMPONENT_NAME = _length(CheckpointComponent.__table__.c.name)
COMPONENT_FILE = _length(CheckpointComponent.__table__.c.file)
EVENT_KIND = _length(Event.__table__.c.kind)
RESUMED_FROM = _length(Segment.__table__.c.resumed_from)
EXIT_REASON = _length(Segment.__table__.c.exit_reason)
EXTERNAL_ID = _length(Run.__table__.c.external_id)


def json_safe(value: Any, depth: int = 0) -> Any:
    """JSON both backends store: NaN and infinities as the strings ``"NaN"``, ``"Infinity"``
    and ``"-Infinity"``, integers beyond int64 as text, clean strings and keys, and no deeper
    than :data:`MAX_JSON_DEPTH` levels."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, int):
        return value if -INT64 <= value < INT64 else _big(value)
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict | list | tuple):
        if depth >= MAX_JSON_DEPTH:
            return TOO_DEEP
        if isinstance(value, dict):
            return {printable(str(k)): json_safe(v, depth + 1) for k, v in value.items()}
        return [json_safe(v, depth + 1) for v in value]
    if hasattr(value, "item") and callable(value.item):  # a numpy scalar
        try:
            return json_safe(value.item(), depth)
        except (TypeError, ValueError):
            pass
    return printable(str(value), 200)


def _big(value: int) -> str:
    try:
        return str(value)
    except ValueError:  # more digits than Python converts
        return f"<an integer of {value.bit_length()} bits>"


def fit_for_storage(parsed: ParsedRun, warnings: Warnings) -> None:
    """Change ``parsed`` in place so that every value fits its column (see the module doc)."""
    _fit_table(parsed.metrics, warnings, "metric", taken=set())
    if parsed.evals is not None:
        _fit_table(parsed.evals, warnings, "evaluation", taken=set(parsed.metrics.columns))
    for event in parsed.events:
        _fit_event(event)
    names: set[str] = set()
    for ckpt in parsed.checkpoints:
        _fit_checkpoint(ckpt, warnings, names)
    parsed.config = json_safe(parsed.config)
    if not isinstance(parsed.config, dict):
        parsed.config = {}
    if parsed.external_id is not None:
        parsed.external_id = printable(parsed.external_id, EXTERNAL_ID)
    parsed.dataset_size = _int(parsed.dataset_size, INT64, "dataset size", warnings)
    parsed.global_batch_size = _int(parsed.global_batch_size, INT32, "global batch size", warnings)


def _fit_table(table: MetricTable, warnings: Warnings, what: str, taken: set[str]) -> None:
    fitted: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key, column in table.columns.items():
        clean = printable(key)
        shown = printable(key, 60)
        if not clean:
            warnings.add(f"a {what} with an empty name; not stored", kind="storable:empty-key")
            continue
        if len(clean) > KEY:
            warnings.add(
                f"{what} key '{shown}' is longer than {KEY} characters; not stored",
                kind="storable:long-key",
            )
            continue
        if clean in taken or clean in fitted:
            warnings.add(
                f"{what} key '{shown}' names a series already stored for this run (a training"
                " metric of the same name, or a key that differs only in characters that cannot"
                " be stored); not stored",
                kind="storable:same-key",
            )
            continue
        fitted[clean] = column
        sources[clean] = printable(table.source_keys.get(key, key), SOURCE_KEY)
    table.columns = fitted
    table.source_keys = sources


def _fit_event(event: EventRecord) -> None:
    event.kind = printable(event.kind, EVENT_KIND)
    payload = json_safe(event.payload)
    if not isinstance(payload, dict):
        payload = {}
    for key, limit in (("resumed_from", RESUMED_FROM), ("reason", EXIT_REASON)):
        if isinstance(payload.get(key), str):
            payload[key] = printable(payload[key], limit)
    event.payload = payload


def _fit_checkpoint(ckpt: CheckpointRecord, warnings: Warnings, names: set[str]) -> None:
    name = printable(ckpt.name, CHECKPOINT_NAME)
    unique, n = name, 1
    while unique in names:
        n += 1
        suffix = f"~{n}"
        unique = name[: CHECKPOINT_NAME - len(suffix)] + suffix
    if unique != ckpt.name:
        warnings.add(
            f"checkpoint '{printable(ckpt.name, 60)}' stored as '{printable(unique, 60)}'"
            " (a name too long, repeated or with characters that cannot be stored)",
            kind="storable:checkpoint-name",
        )
    names.add(unique)
    ckpt.name = unique
    components = {}
    for component, record in ckpt.components.items():
        clean = printable(component)
        if len(clean) > COMPONENT_NAME or clean in components:
            warnings.add(
                f"checkpoint {unique}: component '{printable(component, 60)}' not stored (a"
                f" name longer than {COMPONENT_NAME} characters, or repeated)",
                kind="storable:component",
            )
            continue
        if record.file is not None:
            record.file = printable(record.file, COMPONENT_FILE)
        record.bytes = _int(record.bytes, INT64, f"{unique} {clean} bytes", warnings)
        components[clean] = record
    ckpt.components = components
    ckpt.manifest = json_safe(ckpt.manifest) if isinstance(ckpt.manifest, dict) else {}
    if ckpt.data_state is not None:
        state = json_safe(ckpt.data_state)
        ckpt.data_state = state if isinstance(state, dict) else None
    for field in ("consumed_samples", "consumed_in_epoch", "seed", "dataset_size"):
        setattr(ckpt, field, _int(getattr(ckpt, field), INT64, f"{unique} {field}", warnings))
    for field in ("epoch", "global_batch_size"):
        setattr(ckpt, field, _int(getattr(ckpt, field), INT32, f"{unique} {field}", warnings))


def _int(value: int | None, below: int, what: str, warnings: Warnings) -> int | None:
    if value is None or -below <= value < below:
        return value
    warnings.add(f"{what} {_big(value)[:30]} is out of range; not stored", kind="storable:int")
    return None

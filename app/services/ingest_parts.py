"""A large sample trace parsed across workers, with fan-out and fan-in in the database.

``start`` (in the ingest task, before parsing): when the source holds a ``samples.jsonl``
larger than ``ingest_part_bytes``, the trace is copied out of the source into the shared source
store, cut into byte ranges of whole lines (``app.ingest.line_ranges``), and one task per range
is queued; the job stays ``running`` and the batch holds its claim token. ``run_part`` parses its
range into arrays beside the copy, refreshing the job's heartbeat. The part that brings the
batch's count of parsed parts to the total (one atomic ``UPDATE ... RETURNING``) returns the job
and its token, and the caller sends the job back to the ingest queue: that try finds the parts
(``parsed_traces``), reads the rest of the source as usual with the trace already parsed, stores
the run and ``discard``\\ s the batch. With one worker the parts simply run one after another.

A part that finds bad input fails the job with the error naming the file and the line, as a
parse in one task would (the first bad line of that part; another part may hold an earlier
one). A part whose job was taken over (the recovery sweep re-queued it after its heartbeat went
stale) drops the batch; the job's new try starts its own.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

import numpy as np
from sqlalchemy import Engine, delete, select, update
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import session_scope
from app.ingest.errors import IngestError, Warnings, printable
from app.ingest.jsonl import iter_json_objects
from app.ingest.line_ranges import LineRange, read_range, split_lines
from app.ingest.records import SampleTrace
from app.ingest.run_directory import read_sample_lines
from app.ingest.source import SourceTree
from app.models import IngestBatch, IngestJob, IngestPart
from app.services.job_claims import ClaimLost, Heartbeat, fenced_update

log = logging.getLogger(__name__)

TRACE_NAME = "samples.jsonl"
PARTS_FOLDER = ".parts"  # under the source store, which every ingest worker shares
COPY = "trace.jsonl"

Enqueue = Callable[[list[int]], None]


@dataclass
class ParsedTraces:
    """What the parts of a finished batch parsed: traces by file, and their warnings."""

    traces: dict[str, SampleTrace] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    parts: int = 0


def start(
    *,
    engine: Engine,
    settings: Settings,
    job_id: int,
    token: str,
    tree: SourceTree,
    enqueue: Enqueue,
) -> bool:
    """Split the sample trace of the job's source (``tree``, already open) into parts and queue
    them: True when the parts now own the parse, False when it belongs in this task (no large
    trace, one part, or a broker that refused the parts)."""
    large = [
        (size, name)
        for name, size in tree.sizes.items()
        if PurePosixPath(name).name == TRACE_NAME and 0 < settings.ingest_part_bytes < size
    ]
    if not large:
        return False
    _, file = max(large)
    discard(engine=engine, settings=settings, job_id=job_id)  # an earlier try's, if any
    folder = f"{PARTS_FOLDER}/job-{job_id}-{token}"
    path = settings.sources_path / folder
    path.mkdir(parents=True, exist_ok=True)
    with tree.open(file) as src, (path / COPY).open("wb") as dst:
        shutil.copyfileobj(src, dst, 16 << 20)
    with (path / COPY).open("rb") as stream:
        ranges = split_lines(stream, (path / COPY).stat().st_size, settings.ingest_part_bytes)
    if len(ranges) < 2:
        shutil.rmtree(path, ignore_errors=True)
        return False
    with session_scope(engine) as session:
        part_ids = _create_batch(session, job_id, token, file, folder, ranges)
    try:
        enqueue(part_ids)
    except Exception:
        log.exception("ingest job %s: could not queue its parts; parsing in one task", job_id)
        discard(engine=engine, settings=settings, job_id=job_id)
        return False
    log.info("ingest job %s: %s parsed in %s parts", job_id, file, len(ranges))
    return True


def _create_batch(
    session: Session, job_id: int, token: str, file: str, folder: str, ranges: list[LineRange]
) -> list[int]:
    batch = IngestBatch(
        job_id=job_id,
        claim_token=token,
        file=file,
        folder=folder,
        parts=len(ranges),
        parts_done=0,
        items=[
            IngestPart(ordinal=i, start=r.start, end=r.end, first_line=r.first_line)
            for i, r in enumerate(ranges)
        ],
    )
    session.add(batch)
    session.flush()
    fenced_update(session, job_id, token, phase=f"parsing samples: 0/{len(ranges)} parts")
    return [part.id for part in batch.items]


@dataclass(frozen=True)
class _Part:
    batch_id: int
    job_id: int
    token: str
    file: str
    folder: str
    ordinal: int
    range: LineRange


def run_part(*, engine: Engine, settings: Settings, part_id: int) -> tuple[int, str] | None:
    """Parse one part. Returns the job id and claim token when this was the batch's last part
    (the caller sends the job back to the ingest queue); also when a redelivered message finds
    the batch already complete, so a lost message is sent again."""
    with session_scope(engine) as session:
        row = session.get(IngestPart, part_id)
        if row is None:  # its batch was finished, dropped, or replaced
            return None
        batch = row.batch
        if row.done_at is not None:
            return (batch.job_id, batch.claim_token) if batch.parts_done >= batch.parts else None
        part = _Part(
            batch.id,
            batch.job_id,
            batch.claim_token,
            batch.file,
            batch.folder,
            row.ordinal,
            LineRange(row.start, row.end, row.first_line),
        )
    folder = settings.sources_path / part.folder
    warnings = Warnings()
    try:
        with Heartbeat(engine, part.job_id, part.token, settings.job_heartbeat_s) as heartbeat:
            trace = _parse_range(folder / COPY, part, warnings, settings.max_line_bytes)
            heartbeat.check()
            save_part(folder / f"part-{part.ordinal:05d}", trace)
            with session_scope(engine) as session:
                return _record(session, part, part_id, warnings.summary())
    except ClaimLost:
        log.warning("ingest batch %s: its job was taken over; dropping it", part.batch_id)
        discard(engine=engine, settings=settings, job_id=part.job_id, batch_id=part.batch_id)
        return None
    except IngestError as exc:
        _fail(engine, part, str(exc), warnings)
    except (OSError, ValueError) as exc:  # the copy is gone or damaged: not the user's input
        log.exception("ingest batch %s: part %s failed", part.batch_id, part.ordinal)
        _fail(engine, part, f"internal error: {type(exc).__name__}: {exc}", warnings)
    discard(engine=engine, settings=settings, job_id=part.job_id, batch_id=part.batch_id)
    return None


def _parse_range(copy: Path, part: _Part, warnings: Warnings, max_line_bytes: int) -> SampleTrace:
    with copy.open("rb") as stream:
        objects = iter_json_objects(
            read_range(stream, part.range),
            part.file,
            warnings,
            max_line_bytes=max_line_bytes,
            first_line=part.range.first_line,
        )
        return read_sample_lines(objects, part.file)


ARRAYS = ("steps", "counts", "ids")


def save_part(prefix: Path, trace: SampleTrace) -> None:
    """Write a part's arrays as ``PREFIX.steps.npy`` and so on, each complete or not at all;
    ids as 32-bit when they fit. (Plain ``.npy`` files read back memory-mapped: an ``.npz``
    would check a CRC of every byte on the way.)"""
    ids = trace.ids
    if ids.size and int(ids.min()) >= 0 and int(ids.max()) < 1 << 32:
        ids = ids.astype(np.uint32)
    for name, array in zip(ARRAYS, (trace.steps, trace.counts, ids), strict=True):
        final = prefix.with_name(f"{prefix.name}.{name}.npy")
        partial = final.with_name(final.name + ".partial")
        with partial.open("wb") as out:
            np.save(out, array)
        partial.replace(final)


def load_parts(prefixes: list[Path]) -> SampleTrace:
    """The trace of parts written by ``save_part``, in the order given."""
    columns = [
        [
            np.load(prefix.with_name(f"{prefix.name}.{name}.npy"), mmap_mode="r")
            for prefix in prefixes
        ]
        for name in ARRAYS
    ]
    steps, counts, ids = (np.concatenate(parts, dtype=np.int64) for parts in columns)
    return SampleTrace(steps, counts, ids)


def _record(
    session: Session, part: _Part, part_id: int, warnings: list[str]
) -> tuple[int, str] | None:
    """Count the part parsed, once; the job and its token when it was the batch's last."""
    stored = session.execute(
        update(IngestPart)
        .where(IngestPart.id == part_id, IngestPart.done_at.is_(None))
        .values(done_at=datetime.now(UTC), warnings=warnings)
        .execution_options(synchronize_session=False)
    )
    if getattr(stored, "rowcount", 0) != 1:  # done meanwhile by a duplicate, or dropped
        return None
    done, total = session.execute(
        update(IngestBatch)
        .where(IngestBatch.id == part.batch_id)
        .values(parts_done=IngestBatch.parts_done + 1)
        .returning(IngestBatch.parts_done, IngestBatch.parts)
        .execution_options(synchronize_session=False)
    ).one()
    fenced_update(session, part.job_id, part.token, phase=f"parsing samples: {done}/{total} parts")
    return (part.job_id, part.token) if done >= total else None


def _fail(engine: Engine, part: _Part, error: str, warnings: Warnings) -> None:
    try:
        with session_scope(engine) as session:
            job = session.get(IngestJob, part.job_id)
            earlier = list(job.warnings or []) if job is not None else []
            fenced_update(
                session,
                part.job_id,
                part.token,
                state="failed",
                phase=None,
                error=printable(error, 2000),
                warnings=[*earlier, *warnings.summary()],
                finished_at=datetime.now(UTC),
            )
    except ClaimLost:
        pass  # the job is another worker's now, or another part failed it first


def parsed_traces(*, engine: Engine, settings: Settings, job_id: int, token: str) -> ParsedTraces:
    """The traces parsed by this try's complete batch (empty when there is none)."""
    with session_scope(engine) as session:
        batch = session.scalars(
            select(IngestBatch).where(
                IngestBatch.job_id == job_id, IngestBatch.claim_token == token
            )
        ).first()
        if batch is None or batch.parts_done < batch.parts:
            return ParsedTraces()
        folder = settings.sources_path / batch.folder
        names = [folder / f"part-{part.ordinal:05d}" for part in batch.items]
        warnings = [w for part in batch.items for w in (part.warnings or [])]
        file, parts = batch.file, batch.parts
    return ParsedTraces(traces={file: load_parts(names)}, warnings=warnings, parts=parts)


def discard(
    *, engine: Engine, settings: Settings, job_id: int, batch_id: int | None = None
) -> None:
    """Remove a job's batches (or one of them) and their parsed arrays."""
    with session_scope(engine) as session:
        query = select(IngestBatch.id, IngestBatch.folder).where(IngestBatch.job_id == job_id)
        if batch_id is not None:
            query = query.where(IngestBatch.id == batch_id)
        batches = session.execute(query).all()
        if batches:
            session.execute(delete(IngestBatch).where(IngestBatch.id.in_([b.id for b in batches])))
    for batch in batches:
        shutil.rmtree(settings.sources_path / batch.folder, ignore_errors=True)

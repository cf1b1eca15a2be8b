"""Live runs: records streamed by a training-side logger are appended to a run directory kept
in the source store (``live/<run id>/``), and the run is re-ingested and re-analysed from it,
debounced, while training goes on.

Each (logger, batch) pair is applied once: loggers retry, and a retried batch is acknowledged
without being written again. Appends to one run's directory are serialized with a file lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.config import Settings
from app.models import Project, Run, StreamBatch

LINE_FILES = {
    "metrics": "metrics.jsonl",
    "samples": "samples.jsonl",
    "events": "events.jsonl",
    "evals": "evals.jsonl",
}
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
MAX_RECORDS_PER_BATCH = 100_000


class BadRecords(ValueError):
    """A batch that cannot be applied; the message names the record."""


def live_key(run_id: int) -> str:
    return f"live/{run_id}"


def live_dir(settings: Settings, run_id: int) -> Path:
    return settings.sources_path / live_key(run_id)


def get_or_create_run(
    *, session: Session, project: str, name: str, config: dict[str, Any] | None = None
) -> tuple[Run, bool]:
    """The run named ``project/name``, created as a live run when it does not exist yet."""
    found = session.scalars(
        select(Run).join(Project).where(Project.name == project, Run.name == name)
    ).one_or_none()
    if found is not None:
        if config and not found.config:
            found.config = config
        return found, False
    proj = session.scalars(select(Project).where(Project.name == project)).one_or_none()
    if proj is None:
        proj = Project(name=project)
        session.add(proj)
        session.flush()
    run = Run(
        project_id=proj.id,
        name=name,
        source_format="live",
        status="running",
        config=config or {},
        live=True,
    )
    session.add(run)
    session.flush()
    return run, True


def append_batch(
    *,
    session: Session,
    settings: Settings,
    run: Run,
    logger: str,
    batch: int,
    records: list[Any],
) -> int:
    """Append one streamed batch to the run's live directory and commit. Returns the number of
    records written (0 for a batch already applied).

    Under the directory's lock: the batch marker commits first, then the files are written; if
    writing fails the marker is removed again so the logger's retry applies the batch."""
    if len(records) > MAX_RECORDS_PER_BATCH:
        raise BadRecords(f"a batch holds at most {MAX_RECORDS_PER_BATCH} records")
    prepared = _prepare(records)
    folder = live_dir(settings, run.id)
    with _locked(folder):
        seen = session.scalar(
            select(StreamBatch.id).where(
                StreamBatch.run_id == run.id,
                StreamBatch.logger == logger,
                StreamBatch.batch == batch,
            )
        )
        if seen is not None:
            return 0  # a retry of a batch that was applied
        marker = StreamBatch(run_id=run.id, logger=logger, batch=batch, records=len(records))
        session.add(marker)
        run.live = True
        run.refresh_requested_at = datetime.now(UTC)
        session.commit()
        try:
            _write(folder, prepared)
        except OSError:
            session.delete(marker)
            session.commit()
            raise
    return len(records)


def _write(folder: Path, prepared: list[tuple[str, str, str]]) -> None:
    for relative, content, mode in prepared:
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if mode == "append":
            with target.open("a", encoding="utf-8") as f:
                f.write(content)
        else:
            tmp = target.with_suffix(target.suffix + ".tmp")
            tmp.write_text(content, encoding="utf-8")
            tmp.replace(target)


def _prepare(records: list[Any]) -> list[tuple[str, str, str]]:
    """(relative path, text, "append" | "replace") for each record, validated first so a bad
    batch writes nothing."""
    lines: dict[str, list[str]] = {}
    replacements: list[tuple[str, str, str]] = []
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise BadRecords(f"record {index}: expected an object")
        kind = record.get("file")
        if kind in LINE_FILES:
            data = record.get("data")
            if not isinstance(data, dict):
                raise BadRecords(f"record {index}: 'data' must be an object")
            lines.setdefault(LINE_FILES[kind], []).append(_dumps(data, index) + "\n")
        elif kind == "config":
            data = record.get("data")
            if not isinstance(data, dict):
                raise BadRecords(f"record {index}: 'data' must be an object")
            replacements.append(("config.json", _dumps(data, index), "replace"))
        elif kind == "checkpoint":
            replacements.extend(_checkpoint_files(record, index))
        else:
            raise BadRecords(
                f"record {index}: unknown file {kind!r} (metrics, samples, events, evals,"
                " config, checkpoint)"
            )
    appends = [(name, "".join(text), "append") for name, text in lines.items()]
    return appends + replacements


def _checkpoint_files(record: dict[str, Any], index: int) -> list[tuple[str, str, str]]:
    name = record.get("name")
    manifest = record.get("manifest")
    if not isinstance(name, str) or not SAFE_NAME.match(name):
        raise BadRecords(f"record {index}: checkpoint 'name' must be a plain folder name")
    if not isinstance(manifest, dict):
        raise BadRecords(f"record {index}: checkpoint 'manifest' must be an object")
    files = [(f"checkpoints/{name}/manifest.json", _dumps(manifest, index), "replace")]
    extra = record.get("extra") or {}
    if not isinstance(extra, dict):
        raise BadRecords(f"record {index}: checkpoint 'extra' must be an object")
    for file_name, content in extra.items():
        if not SAFE_NAME.match(str(file_name)) or not str(file_name).endswith(".json"):
            raise BadRecords(f"record {index}: extra file {file_name!r} must be a plain .json name")
        files.append((f"checkpoints/{name}/{file_name}", _dumps(content, index), "replace"))
    return files


def _dumps(data: Any, index: int) -> str:
    try:
        return json.dumps(data, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise BadRecords(f"record {index}: not JSON-serialisable ({exc})") from None


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def fingerprint(folder: Path) -> str:
    """A cheap identity of a growing directory: names, sizes and modification times."""
    parts = []
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.name.startswith("."):
            stat = path.stat()
            parts.append(f"{path.relative_to(folder)}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def needs_enqueue(run: Run) -> bool:
    """Whether no refresh is pending yet (call before recording the new request)."""
    if run.refresh_requested_at is None:
        return True
    return run.refreshed_at is not None and run.refresh_requested_at <= run.refreshed_at


def start_refresh(*, session: Session, settings: Settings, run_id: int) -> int | None:
    """Create the ingest job that re-reads a live run's directory, or None if nothing is new.
    Older finished refresh jobs of the run are pruned (the live directory is the record)."""
    from app.services import ingest as ingest_service
    from app.services.sources import StoredSource

    run = session.get(Run, run_id)
    if run is None or not run.live:
        return None
    if run.refreshed_at is not None and (
        run.refresh_requested_at is None or run.refresh_requested_at <= run.refreshed_at
    ):
        return None
    folder = live_dir(settings, run.id)
    if not (folder / "metrics.jsonl").exists():
        return None  # nothing to read yet: the next batch asks again
    run.refreshed_at = datetime.now(UTC)
    source = StoredSource(
        key=live_key(run.id),
        sha256=fingerprint(folder),
        bytes=folder_bytes(folder),
        kind="directory",
        name=f"live/{run.name}",
        default_run_name=run.name,
    )
    project = session.get(Project, run.project_id)
    assert project is not None
    job = ingest_service.submit(
        session=session, source=source, project=project.name, run_name=run.name
    )
    ingest_service.prune_jobs(session=session, run_id=run.id, source_key=source.key, keep=5)
    return job.id


def more_pending(*, session: Session, run_id: int) -> bool:
    run = session.get(Run, run_id)
    return bool(
        run is not None
        and run.refresh_requested_at is not None
        and run.refreshed_at is not None
        and run.refresh_requested_at > run.refreshed_at
    )

"""The raw-source store: every ingested source is kept, content-addressed, before it is parsed.

A run directory is packed into a deterministic tar (sorted names, zeroed owners and times), so
ingesting an unchanged directory twice yields the same digest.
"""

from __future__ import annotations

import hashlib
import os
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from app.config import Settings
from app.ingest.errors import IngestError, Warnings, printable
from app.ingest.source import Limits, SourceTree, archive_kind, copy_limited, open_source

MAX_NAME = 200  # characters of an uploaded file's name kept (the job's source and run names)


@dataclass(frozen=True)
class StoredSource:
    key: str  # path inside the source store
    sha256: str
    bytes: int
    kind: str  # file, tar, tar.gz, zip
    name: str  # what the user handed in
    default_run_name: str


class _HashingWriter:
    def __init__(self, sink: IO[bytes]) -> None:
        self.sink = sink
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.size += len(data)
        return self.sink.write(data)

    def flush(self) -> None:
        self.sink.flush()


def store_path(path: Path, settings: Settings) -> StoredSource:
    """Copy a run directory, a single file or an archive into the store."""
    path = path.expanduser()
    if not path.exists():
        raise IngestError("no such file or directory", file=str(path))
    if path.is_dir():
        return _store_directory(path, settings)
    with path.open("rb") as stream:
        return store_stream(stream, path.name, settings, parent_name=path.resolve().parent.name)


def store_stream(
    stream: IO[bytes],
    filename: str,
    settings: Settings,
    *,
    limit: int | None = None,
    parent_name: str | None = None,
) -> StoredSource:
    """Copy an uploaded or opened file into the store, refusing more than ``limit`` bytes."""
    filename = _clean_name(os.path.basename(filename.replace("\\", "/"))) or "upload"
    kind = archive_kind(filename) or "file"
    suffix = {"file": ".data", "tar": ".tar", "tar.gz": ".tar.gz", "zip": ".zip"}[kind]
    with _staging(settings) as (tmp, writer):
        copy_limited(stream, writer, limit or settings.max_source_bytes, filename)
        stored = _commit(tmp, writer, settings, suffix)
    return StoredSource(
        key=stored,
        sha256=writer.digest.hexdigest(),
        bytes=writer.size,
        kind=kind,
        name=filename,
        default_run_name=default_run_name(filename, kind, parent_name),
    )


def store_directory(
    root: Path, settings: Settings, *, only: list[str] | None = None, name: str | None = None
) -> StoredSource:
    """Pack a directory (or only the sub-folders ``only``, relative to it) into the store."""
    return _store_directory(root, settings, only=only, name=name)


def _store_directory(
    root: Path, settings: Settings, *, only: list[str] | None = None, name: str | None = None
) -> StoredSource:
    if only is None:
        paths = sorted(root.rglob("*"))
    else:
        paths = sorted({p for part in only for p in [root / part, *(root / part).rglob("*")]})
    with _staging(settings) as (tmp, writer):
        total = 0
        with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
            for path in paths:
                info = tar.gettarinfo(str(path), arcname=path.relative_to(root).as_posix())
                if info is None:
                    continue  # a socket: tar has no member type for it
                info.mtime = 0
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mode = 0o755 if info.isdir() else 0o644
                if info.isfile():
                    total += info.size
                    if total > settings.max_source_bytes:
                        raise IngestError(
                            f"larger than the limit of {settings.max_source_bytes} bytes",
                            file=str(root),
                        )
                    with path.open("rb") as stream:
                        tar.addfile(info, stream)
                else:
                    tar.addfile(info)
        stored = _commit(tmp, writer, settings, ".tar")
    return StoredSource(
        key=stored,
        sha256=writer.digest.hexdigest(),
        bytes=writer.size,
        kind="tar",
        name=name or root.resolve().name,
        default_run_name=name or root.resolve().name,
    )


class _staging:
    """A temporary file in the store, removed unless committed."""

    def __init__(self, settings: Settings) -> None:
        self.root = settings.sources_path
        self.path: Path | None = None

    def __enter__(self) -> tuple[Path, _HashingWriter]:
        (self.root / "tmp").mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=self.root / "tmp", suffix=".part")
        self.path = Path(name)
        self.file = os.fdopen(fd, "wb")
        return self.path, _HashingWriter(self.file)

    def __exit__(self, *exc: object) -> None:
        self.file.close()
        if self.path is not None and self.path.exists():
            self.path.unlink()


def _commit(tmp: Path, writer: _HashingWriter, settings: Settings, suffix: str) -> str:
    writer.flush()
    digest = writer.digest.hexdigest()
    key = f"{digest[:2]}/{digest}{suffix}"
    target = settings.sources_path / key
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists():
        os.replace(tmp, target)
    return key


def source_file(settings: Settings, key: str) -> Path:
    path = (settings.sources_path / key).resolve()
    if settings.sources_path not in path.parents:
        raise IngestError("source key outside the source store", file=key)
    return path


def _clean_name(filename: str) -> str:
    """A client's file name as the job records it: no NUL or lone surrogate, and at most
    :data:`MAX_NAME` characters (the end kept, so an archive keeps its suffix)."""
    name = printable(filename)
    return name if len(name) <= MAX_NAME else name[: MAX_NAME - 21] + "\u2026" + name[-20:]


def default_run_name(filename: str, kind: str, parent_name: str | None) -> str:
    if kind != "file":
        lower = filename.lower()
        for suffix in (".tar.gz", ".tgz", ".tar", ".zip"):
            if lower.endswith(suffix):
                return filename[: -len(suffix)] or "run"
    if filename == "metrics.jsonl" and parent_name:
        return parent_name
    return filename.rsplit(".", 1)[0] or filename


EXTERNAL = "external"  # a source read in place (a watched folder), not copied into the store


@contextmanager
def open_stored(
    settings: Settings, key: str, kind: str, name: str, warnings: Warnings
) -> Iterator[SourceTree]:
    """Open a job's source as a tree: a stored source from the store, an external one (a
    watched folder) where it is."""
    if kind == EXTERNAL:
        path, kind = Path(key), "directory"
        if not path.is_dir():
            raise IngestError("the watched folder is gone", file=key)
    else:
        path = source_file(settings, key)
        if not path.exists():
            raise IngestError("the raw source is missing from the source store", file=name)
    limits = Limits(
        max_source_bytes=settings.max_source_bytes,
        max_members=settings.max_archive_members,
        max_compression_ratio=settings.max_compression_ratio,
        max_line_bytes=settings.max_line_bytes,
    )
    scratch = settings.resolved_home / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    with open_source(path, kind, name, warnings, limits, scratch) as tree:
        yield tree

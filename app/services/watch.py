"""Watch folders: new and growing runs under a folder are ingested as they appear and change.

A run is a folder some reader recognises (a run directory, a W&B run, TensorBoard logs, HF
checkpoints, Megatron logs): the watched folder itself or one of its sub-folders. A run is
(re)submitted when its fingerprint (file names, sizes, modification times) changes, at most
once per poll; it is read where it is, so workers must see the same path.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Engine

from app.config import Settings
from app.db import session_scope
from app.ingest.errors import IngestError, Warnings
from app.ingest.formats import readers
from app.ingest.source import DirectoryTree, Limits
from app.services import ingest as ingest_service
from app.services.live import fingerprint, folder_bytes
from app.services.sources import EXTERNAL, StoredSource

log = logging.getLogger(__name__)


@dataclass
class Watcher:
    folders: list[Path]
    project: str
    engine: Engine
    settings: Settings
    enqueue: Callable[[int], None]
    seen: dict[Path, str] = field(default_factory=dict)

    def poll(self) -> list[int]:
        """Submit every new or changed run; return the job ids created."""
        jobs = []
        for run in self.candidates():
            mark = fingerprint(run)
            if self.seen.get(run) == mark:
                continue
            self.seen[run] = mark
            job_id = self._submit(run, mark)
            self.enqueue(job_id)
            jobs.append(job_id)
        return jobs

    def candidates(self) -> list[Path]:
        found = []
        for folder in self.folders:
            if is_run(folder, self.settings, at_top=True):
                found.append(folder.resolve())
                continue
            for child in sorted(os.scandir(folder), key=lambda e: e.name):
                path = Path(child.path)
                if (
                    child.is_dir()
                    and not child.name.startswith(".")
                    and is_run(path, self.settings)
                ):
                    found.append(path.resolve())
        return found

    def _submit(self, run: Path, mark: str) -> int:
        source = StoredSource(
            key=str(run),
            sha256=mark,
            bytes=folder_bytes(run),
            kind=EXTERNAL,
            name=run.name,
            default_run_name=run.name,
        )
        with session_scope(self.engine) as session:
            job = ingest_service.submit(
                session=session, source=source, project=self.project, run_name=run.name
            )
            log.info("watch: %s -> job %s", run, job.id)
            return job.id


def is_run(folder: Path, settings: Settings, *, at_top: bool = False) -> bool:
    """Whether a reader recognises one run in ``folder`` (``at_top``: in the folder itself,
    not in a sub-folder of it)."""
    limits = Limits(
        max_source_bytes=settings.max_source_bytes,
        max_members=settings.max_archive_members,
        max_compression_ratio=settings.max_compression_ratio,
        max_line_bytes=settings.max_line_bytes,
    )
    try:
        tree = DirectoryTree(folder, Warnings(), limits)
        roots = [reader.detect(tree) for reader in readers()]
    except (IngestError, OSError):  # several runs, unreadable or too large: not one run
        return False
    return any(root == "" if at_top else root is not None for root in roots)

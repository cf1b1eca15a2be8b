"""Verdict responses kept while the run they describe is unchanged.

A verdict is built from the run's findings and checkpoint verdicts: four queries and a
validation per request. Every write to those also writes the run's row: an analysis sets
``analyzed_at`` (and so ``updated_at``), a re-ingest bumps ``data_generation`` and
``updated_at``. A response is therefore kept under its run's stamp (those columns and the
verdict), read with one small query per request, and rebuilt as soon as the stamp differs.
The stamp is read before the verdict, so a kept response is never older than the stamp it is
kept under: it is never stale, only sometimes rebuilt once more than needed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from pydantic import TypeAdapter
from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from app.api.schemas import VerdictOut
from app.models import Project, Run

MAX_RUNS = 256
VERDICT = TypeAdapter(VerdictOut)  # what FastAPI validates and serializes a VerdictOut with


@dataclass(frozen=True)
class RunStamp:
    project: str
    version: tuple[Any, ...]  # equal versions: the same findings and checkpoint verdicts


STAMP = (  # built once: building a select costs more than running this one
    select(Project.name, Run.data_generation, Run.analyzed_at, Run.updated_at, Run.verdict)
    .join(Project, Run.project_id == Project.id)
    .where(Run.id == bindparam("run_id"))
)


def run_stamp(session: Session, run_id: int) -> RunStamp | None:
    """The run's project and version, or None when there is no such run."""
    row = session.connection().execute(STAMP, {"run_id": run_id}).one_or_none()
    if row is None:
        return None
    return RunStamp(project=row[0], version=tuple(row[1:]))


class VerdictCache:
    """Serialized verdicts by run id, the least recently used dropped past ``max_runs``."""

    def __init__(self, max_runs: int = MAX_RUNS) -> None:
        self.max_runs = max_runs
        self._entries: OrderedDict[int, tuple[tuple[Any, ...], bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, run_id: int, version: tuple[Any, ...]) -> bytes | None:
        with self._lock:
            entry = self._entries.get(run_id)
            if entry is None or entry[0] != version:
                return None
            self._entries.move_to_end(run_id)
            return entry[1]

    def put(self, run_id: int, version: tuple[Any, ...], body: bytes) -> None:
        if self.max_runs <= 0:
            return
        with self._lock:
            self._entries[run_id] = (version, body)
            self._entries.move_to_end(run_id)
            while len(self._entries) > self.max_runs:
                self._entries.popitem(last=False)


def verdict_cache(api: FastAPI) -> VerdictCache:
    """The app's kept verdicts (made on first use)."""
    cache: VerdictCache | None = getattr(api.state, "verdict_cache", None)
    if cache is None:
        cache = api.state.verdict_cache = VerdictCache()
    return cache

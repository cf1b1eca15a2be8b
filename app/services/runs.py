"""Queries for runs, their segments and checkpoints."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import exists, func, select
from sqlalchemy.orm import Session, defer, selectinload

from app.models import Checkpoint, MetricSeries, Project, Run, RunTag, Segment


@dataclass
class RunFilter:
    project: str | None = None
    status: str | None = None
    search: str | None = None
    limit: int = 50
    offset: int = 0
    verdict: str | None = None
    order: str = "updated"  # updated, name, steps, verdict; a leading "-" reverses
    tags: tuple[str, ...] = ()  # runs carrying every one of these tags
    updated_after: datetime | None = None
    updated_before: datetime | None = None
    name: str | None = None  # exact run name


def list_runs(*, session: Session, filters: RunFilter) -> tuple[list[tuple[Run, str]], int]:
    """Runs, newest first, with their project names, and the total matching count."""
    query = select(Run, Project.name).join(Project, Run.project_id == Project.id)
    if filters.project:
        query = query.where(Project.name == filters.project)
    if filters.status:
        query = query.where(Run.status == filters.status)
    if filters.verdict:
        query = query.where(Run.verdict == filters.verdict)
    if filters.name:
        query = query.where(Run.name == filters.name)
    for tag in filters.tags:
        query = query.where(exists().where(RunTag.run_id == Run.id, RunTag.tag == tag))
    if filters.updated_after is not None:
        query = query.where(Run.updated_at >= filters.updated_after)
    if filters.updated_before is not None:
        query = query.where(Run.updated_at < filters.updated_before)
    if filters.search:
        query = query.where(Run.name.contains(filters.search, autoescape=True))
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    rows = session.execute(
        query.order_by(*_ordering(filters.order))
        .limit(filters.limit)
        .offset(filters.offset)
        .options(defer(Run.config), defer(Run.analysis))  # large JSON no listing shows
    ).all()
    return [(run, project) for run, project in rows], int(total)


ORDERS: dict[str, tuple[Any, bool]] = {  # column, descending by default
    "updated": (Run.updated_at, True),
    "name": (Run.name, False),
    "steps": (Run.num_steps, True),
    "verdict": (Run.verdict, False),
}


def _ordering(order: str) -> tuple[Any, Any]:
    column, descending = ORDERS.get(order.lstrip("-"), ORDERS["updated"])
    if order.startswith("-"):
        descending = not descending
    if descending:
        return column.desc(), Run.id.desc()
    return column.asc(), Run.id.asc()


def projects(*, session: Session) -> list[str]:
    return list(session.scalars(select(Project.name).order_by(Project.name)))


def get_run(*, session: Session, run_id: int) -> Run | None:
    return session.scalars(
        select(Run).where(Run.id == run_id).options(selectinload(Run.project))
    ).one_or_none()


class RunNotFound(LookupError):
    pass


def find_run(*, session: Session, ref: str) -> Run:
    """A run by id, ``project/name`` or a name unique across projects."""
    if ref.isdigit():
        run = get_run(session=session, run_id=int(ref))
        if run is None:
            raise RunNotFound(f"no run with id {ref}")
        return run
    query = select(Run).join(Project, Run.project_id == Project.id)
    if "/" in ref:
        project, name = ref.split("/", 1)
        query = query.where(Project.name == project, Run.name == name)
    else:
        query = query.where(Run.name == ref)
    runs = list(session.scalars(query.options(selectinload(Run.project)).limit(2)))
    if not runs:
        raise RunNotFound(f"no run named {ref!r}")
    if len(runs) > 1:
        raise RunNotFound(f"several runs are named {ref!r}: use project/name or the run id")
    return runs[0]


def segments(*, session: Session, run_id: int) -> list[Segment]:
    return list(
        session.scalars(select(Segment).where(Segment.run_id == run_id).order_by(Segment.ordinal))
    )


def checkpoints(*, session: Session, run_id: int) -> list[Checkpoint]:
    return list(
        session.scalars(
            select(Checkpoint)
            .where(Checkpoint.run_id == run_id)
            .order_by(Checkpoint.step, Checkpoint.name)
        )
    )


def find_checkpoint(checkpoints: list[Checkpoint], ref: str) -> Checkpoint | None:
    """By exact name first; a number matches the checkpoint saved at that step (the last one
    when several share it)."""
    for ckpt in checkpoints:
        if ckpt.name == ref:
            return ckpt
    if ref.lstrip("-").isdigit():
        at_step = [c for c in checkpoints if c.step == int(ref)]
        return at_step[-1] if at_step else None
    return None


def series(*, session: Session, run_id: int) -> list[MetricSeries]:
    return list(
        session.scalars(
            select(MetricSeries)
            .where(MetricSeries.run_id == run_id)
            .order_by(MetricSeries.kind.desc(), MetricSeries.key)
        )
    )

"""Live logging: a training-side logger creates its run and streams records to it."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Response
from pydantic import BaseModel, Field

from app.api.auth import Writer, authorize
from app.api.deps import SessionDep, SettingsDep
from app.services import live as live_service
from app.services import runs as run_service
from workers.tasks import enqueue_refresh

router = APIRouter(prefix="/api/v1/runs", tags=["live"])


class RunCreate(BaseModel):
    project: Annotated[str, Field(min_length=1, max_length=200)] = "default"
    name: Annotated[str, Field(min_length=1, max_length=300)]
    config: dict[str, Any] = Field(default_factory=dict)


class RunCreated(BaseModel):
    id: int
    project: str
    name: str
    live: bool
    created: bool


class EventBatch(BaseModel):
    logger: Annotated[str, Field(min_length=1, max_length=64, description="The logger's id")]
    batch: Annotated[int, Field(ge=1, description="Increasing per logger; retries repeat it")]
    records: list[dict[str, Any]]


class BatchAccepted(BaseModel):
    accepted: int
    duplicate: bool


@router.post("", response_model=RunCreated)
def create_run(
    body: RunCreate, session: SessionDep, response: Response, principal: Writer
) -> RunCreated:
    """Get or create the run ``project/name`` for live logging."""
    authorize(principal, "write", body.project)
    run, created = live_service.get_or_create_run(
        session=session, project=body.project, name=body.name, config=body.config
    )
    session.commit()
    response.status_code = 201 if created else 200
    return RunCreated(
        id=run.id, project=body.project, name=run.name, live=run.live, created=created
    )


@router.post("/{run_id}/events", status_code=202, response_model=BatchAccepted)
def post_events(
    run_id: int, body: EventBatch, session: SessionDep, settings: SettingsDep, principal: Writer
) -> BatchAccepted:
    """Append a batch of records (metrics, samples, events, evals, config, checkpoint
    manifests) to a live run. A repeated (logger, batch) is acknowledged and not applied again.
    The run is re-ingested and re-analysed a few seconds later. A batch is at most 64 MiB
    (app/api/intake.py refuses larger bodies before reading them)."""
    run = run_service.get_run(session=session, run_id=run_id)
    if run is None:
        raise HTTPException(404, f"run {run_id} not found")
    authorize(principal, "write", run.project.name)
    enqueue = live_service.needs_enqueue(run)
    try:
        accepted = live_service.append_batch(
            session=session,
            settings=settings,
            run=run,
            logger=body.logger,
            batch=body.batch,
            records=body.records,
        )
    except live_service.BadRecords as exc:
        raise HTTPException(422, str(exc)) from None
    session.commit()
    if accepted and enqueue:
        enqueue_refresh(run_id)
    return BatchAccepted(accepted=accepted, duplicate=accepted == 0 and bool(body.records))

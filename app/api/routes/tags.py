"""Run tags: read them, add and remove them."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from app.api.auth import Reader, Writer, authorize
from app.api.deps import SessionDep
from app.api.lookups import get_run_or_404
from app.api.schemas import TagsIn, TagsOut
from app.services import tags as tag_service

router = APIRouter(prefix="/api/v1/runs", tags=["runs"])


@router.get("/{run_id}/tags", response_model=TagsOut)
def get_tags(run_id: int, session: SessionDep, principal: Reader) -> TagsOut:
    run = get_run_or_404(session, run_id)
    authorize(principal, "read", run.project.name)
    return TagsOut(run_id=run_id, tags=tag_service.tags_of(session, run_id))


@router.patch("/{run_id}/tags", response_model=TagsOut)
def update_tags(run_id: int, body: TagsIn, session: SessionDep, principal: Writer) -> TagsOut:
    """Remove ``remove``, then add ``add``; answers the run's tags afterwards."""
    run = get_run_or_404(session, run_id)
    authorize(principal, "write", run.project.name)
    try:
        tag_service.remove_tags(session, run_id, body.remove)
        tag_service.add_tags(session, run_id, body.add)
    except tag_service.TagError as exc:
        raise HTTPException(422, str(exc)) from None
    session.commit()
    return TagsOut(run_id=run_id, tags=tag_service.tags_of(session, run_id))

"""Lookups shared by routers that answer 404 when the thing is missing."""

from __future__ import annotations

from fastapi import HTTPException
from sqlalchemy.orm import Session

from app.models import Run
from app.services import runs as run_service


def get_run_or_404(session: Session, run_id: int) -> Run:
    run = run_service.get_run(session=session, run_id=run_id)
    if run is None:
        raise HTTPException(status_code=404, detail=f"run {run_id} not found")
    return run

"""A run's checkpoints and, per checkpoint, whether it is safe to resume from or promote."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from app.api.auth import Reader, authorize
from app.api.deps import SessionDep
from app.api.lookups import get_run_or_404
from app.api.routes.runs import checkpoint_out
from app.api.schemas import CheckpointCheckOut, CheckpointsOut
from app.services import runs as run_service

router = APIRouter(prefix="/api/v1/runs", tags=["checkpoints"])


@router.get("/{run_id}/checkpoints", response_model=CheckpointsOut)
def list_checkpoints(run_id: int, session: SessionDep, principal: Reader) -> CheckpointsOut:
    """Every checkpoint by step, with its verdict (``safe``/``unsafe``) and reasons."""
    run = get_run_or_404(session, run_id)
    authorize(principal, "read", run.project.name)
    items = run_service.checkpoints(session=session, run_id=run_id)
    return CheckpointsOut(
        run_id=run_id, run_verdict=run.verdict, items=[checkpoint_out(c) for c in items]
    )


@router.get("/{run_id}/checkpoints/{checkpoint}", response_model=CheckpointCheckOut)
def check_checkpoint(
    run_id: int, checkpoint: str, session: SessionDep, principal: Reader
) -> CheckpointCheckOut:
    """One checkpoint by name (``step_000400``) or step (``400``): ``safe`` says whether
    resuming from it or promoting it is trustworthy; ``reasons`` say why not."""
    run = get_run_or_404(session, run_id)
    authorize(principal, "read", run.project.name)
    found = run_service.find_checkpoint(
        run_service.checkpoints(session=session, run_id=run_id), checkpoint
    )
    if found is None:
        raise HTTPException(404, f"run {run_id} has no checkpoint {checkpoint!r}")
    safe = None if found.verdict is None else found.verdict == "safe"
    return CheckpointCheckOut(
        run_id=run_id,
        run_verdict=run.verdict,
        safe=safe,
        reasons=found.verdict_reasons or [],
        checkpoint=checkpoint_out(found),
    )

"""Sample coverage per designed epoch, from the last analysis."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from app.api.auth import Reader, authorize
from app.api.deps import SessionDep
from app.api.lookups import get_run_or_404
from app.api.schemas import CoverageOut, EpochCoverageOut

router = APIRouter(prefix="/api/v1/runs", tags=["runs"])


@router.get("/{run_id}/coverage", response_model=CoverageOut)
def get_coverage(
    run_id: int,
    session: SessionDep,
    principal: Reader,
    grid: Annotated[bool, Query(description="Include the dashboard's heatmap grid")] = False,
) -> CoverageOut:
    """How many dataset samples each epoch never saw or saw more than once. Empty ``epochs``
    when the run has no sample trace (or is not analysed yet)."""
    run = get_run_or_404(session, run_id)
    authorize(principal, "read", run.project.name)
    analysis: dict[str, Any] = run.analysis or {}
    coverage: dict[str, Any] = analysis.get("coverage") or {}
    epochs = [EpochCoverageOut.model_validate(e) for e in coverage.get("epochs") or []]
    return CoverageOut(
        run_id=run_id,
        analyzed_at=run.analyzed_at,
        dataset_size=run.dataset_size,
        sampler=analysis.get("sampler"),
        epoch_plan=analysis.get("epoch_plan"),
        epochs=epochs,
        unseen=sum(e.unseen for e in epochs),
        repeated=sum(e.repeated for e in epochs),
        grid=coverage or None if grid else None,
    )

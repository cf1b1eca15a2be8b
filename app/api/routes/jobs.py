from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query

from app.api.auth import Reader, authorize, project_filter
from app.api.deps import SessionDep
from app.api.schemas import JobOut, JobsPage, Progress
from app.models import IngestJob
from app.services import ingest as ingest_service

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])


def job_out(job: IngestJob) -> JobOut:
    return JobOut(
        id=job.id,
        state=job.state,
        project=job.project,
        run_name=job.run_name,
        run_id=job.run_id,
        source_name=job.source_name,
        source_kind=job.source_kind,
        source_sha256=job.source_sha256,
        source_bytes=job.source_bytes,
        phase=job.phase,
        progress=Progress(done=job.progress_done, total=job.progress_total),
        counts=job.counts or {},
        warnings=job.warnings or [],
        error=job.error,
        attempts=job.attempts,
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
    )


@router.get("", response_model=JobsPage)
def list_jobs(
    session: SessionDep,
    principal: Reader,
    project: str | None = None,
    run_id: int | None = None,
    state: Annotated[str | None, Query(pattern="^(queued|running|succeeded|failed)$")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> JobsPage:
    """Ingest jobs, newest first."""
    if project is not None:
        authorize(principal, "read", project)
    jobs, total = ingest_service.list_jobs(
        session=session,
        project=project or project_filter(principal),
        run_id=run_id,
        state=state,
        limit=limit,
        offset=offset,
    )
    return JobsPage(items=[job_out(j) for j in jobs], total=total, limit=limit, offset=offset)


@router.get("/{job_id}", response_model=JobOut)
def get_job(job_id: int, session: SessionDep, principal: Reader) -> JobOut:
    job = ingest_service.get_job(session=session, job_id=job_id)
    if job is None:
        raise HTTPException(status_code=404, detail=f"job {job_id} not found")
    authorize(principal, "read", job.project)
    return job_out(job)

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from app.api.deps import SessionDep
from app.api.schemas import JobOut, Progress
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


@router.get("/{job_id}", response_model=JobOut)
def get_job(job_id: int, session: SessionDep) -> JobOut:
    job = ingest_service.get_job(session=session, job_id=job_id)
    if job is None:
        raise HTTPException(status_code=404, detail=f"job {job_id} not found")
    return job_out(job)

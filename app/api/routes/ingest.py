from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Form, HTTPException, Response, UploadFile

from app.api.auth import Writer, authorize
from app.api.deps import SessionDep, SettingsDep
from app.api.schemas import JobAccepted
from app.ingest.errors import IngestError
from app.services import ingest as ingest_service
from app.services.sources import store_stream
from workers.tasks import enqueue_ingest

router = APIRouter(prefix="/api/v1", tags=["ingest"])


@router.post("/ingest", status_code=202, response_model=JobAccepted)
def ingest(
    response: Response,
    session: SessionDep,
    settings: SettingsDep,
    principal: Writer,
    file: Annotated[
        UploadFile, File(description="A run archive (.tar, .tar.gz, .zip) or one file")
    ],
    project: Annotated[str, Form(min_length=1, max_length=200)] = "default",
    run: Annotated[str | None, Form(max_length=300)] = None,
) -> JobAccepted:
    """Store the upload as the job's raw source and queue it; poll the returned status URL.

    Its size (``RUNWATCH_MAX_UPLOAD_BYTES``) and token were checked before the body was read
    (app/api/intake.py); the project is checked here, before anything is stored."""
    authorize(principal, "write", project)
    try:
        source = store_stream(
            file.file, file.filename or "upload", settings, limit=settings.max_upload_bytes
        )
    except IngestError as exc:
        raise HTTPException(413, str(exc)) from None
    job = ingest_service.submit(
        session=session, source=source, project=project, run_name=run or source.default_run_name
    )
    session.commit()
    enqueue_ingest(job.id)
    url = f"/api/v1/jobs/{job.id}"
    response.headers["Location"] = url
    return JobAccepted(job_id=job.id, state=job.state, status_url=url)

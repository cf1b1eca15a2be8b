"""Findings across runs, newest first: what CI dashboards and on-call pages poll."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query

from app.api.auth import Reader, authorize, project_filter
from app.api.deps import SessionDep
from app.api.schemas import FindingsPage, RunFindingOut
from app.services import findings as finding_service

router = APIRouter(prefix="/api/v1/findings", tags=["findings"])


@router.get("", response_model=FindingsPage)
def list_findings(
    session: SessionDep,
    principal: Reader,
    project: str | None = None,
    run_id: int | None = None,
    severity: Annotated[
        str | None, Query(pattern="^(info|warning|critical)$", description="Exactly this")
    ] = None,
    min_severity: Annotated[
        str | None, Query(pattern="^(info|warning|critical)$", description="This or worse")
    ] = None,
    kind: str | None = None,
    since: Annotated[datetime | None, Query(description="Found at or after (ISO 8601)")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> FindingsPage:
    scope = project_filter(principal)
    if project is not None:
        authorize(principal, "read", project)
    query = finding_service.FindingQuery(
        project=project or scope,
        run_id=run_id,
        severity=severity,
        min_severity=min_severity,
        kind=kind,
        since=since,
    )
    rows, total = finding_service.search_findings(
        session=session, query=query, limit=limit, offset=offset
    )
    return FindingsPage(
        items=[
            RunFindingOut(
                **finding_service.finding_dict(f), run_id=f.run_id, project=p, run_name=name
            )
            for f, p, name in rows
        ],
        total=total,
        limit=limit,
        offset=offset,
    )

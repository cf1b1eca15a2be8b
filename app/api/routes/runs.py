from __future__ import annotations

from datetime import datetime
from typing import Annotated

import numpy as np
import orjson
from fastapi import APIRouter, HTTPException, Query, Request, Response
from sqlalchemy.orm import Session

from app.api.auth import Reader, authorize, project_filter
from app.api.deps import SessionDep, read_in_session
from app.api.schemas import (
    CheckpointOut,
    ComponentOut,
    FindingOut,
    FindingsOut,
    MetricOut,
    RunDetail,
    RunsPage,
    RunSummary,
    SegmentOut,
    SeriesOut,
    VerdictOut,
)
from app.api.verdict_cache import VERDICT, run_stamp, verdict_cache
from app.models import Checkpoint, Run
from app.services import findings as finding_service
from app.services import metrics as metric_service
from app.services import run_telemetry
from app.services import runs as run_service
from app.services import tags as tag_service
from app.services.telemetry_store import series_payload

router = APIRouter(prefix="/api/v1/runs", tags=["runs"])


def run_summary(run: Run, project: str, tags: list[str]) -> RunSummary:
    return RunSummary(
        tags=tags,
        id=run.id,
        project=project,
        name=run.name,
        external_id=run.external_id,
        source_format=run.source_format,
        status=run.status,
        dataset_size=run.dataset_size,
        global_batch_size=run.global_batch_size,
        first_step=run.first_step,
        last_step=run.last_step,
        num_steps=run.num_steps,
        num_segments=run.num_segments,
        num_resumes=max(run.num_segments - 1, 0),
        verdict=run.verdict,
        started_at=run.started_at,
        ended_at=run.ended_at,
        created_at=run.created_at,
        updated_at=run.updated_at,
    )


def checkpoint_out(ckpt: Checkpoint) -> CheckpointOut:
    seconds = None
    if ckpt.save_started_at is not None and ckpt.save_ended_at is not None:
        seconds = (ckpt.save_ended_at - ckpt.save_started_at).total_seconds()
    return CheckpointOut(
        id=ckpt.id,
        name=ckpt.name,
        step=ckpt.step,
        save_started_at=ckpt.save_started_at,
        save_ended_at=ckpt.save_ended_at,
        save_seconds=seconds,
        consumed_samples=ckpt.consumed_samples,
        epoch=ckpt.epoch,
        consumed_in_epoch=ckpt.consumed_in_epoch,
        seed=ckpt.seed,
        shuffle=ckpt.shuffle,
        dataset_size=ckpt.dataset_size,
        global_batch_size=ckpt.global_batch_size,
        components=[ComponentOut.model_validate(c) for c in ckpt.components],
        data_state=ckpt.data_state,
        verdict=ckpt.verdict,
        verdict_reasons=ckpt.verdict_reasons or [],
    )


def _get_run(session: SessionDep, run_id: int) -> Run:
    run = run_service.get_run(session=session, run_id=run_id)
    if run is None:
        raise HTTPException(status_code=404, detail=f"run {run_id} not found")
    return run


@router.get("", response_model=RunsPage)
async def list_runs(
    request: Request,
    principal: Reader,
    project: str | None = None,
    status: str | None = None,
    verdict: Annotated[str | None, Query(pattern="^(pass|warn|fail)$")] = None,
    q: Annotated[str | None, Query(description="Substring of the run name")] = None,
    name: Annotated[str | None, Query(description="Exact run name")] = None,
    tag: Annotated[list[str] | None, Query(description="Runs with every one of these tags")] = None,
    updated_after: Annotated[datetime | None, Query(description="ISO 8601")] = None,
    updated_before: Annotated[datetime | None, Query(description="ISO 8601")] = None,
    order: Annotated[
        str, Query(pattern="^-?(updated|name|steps|verdict)$", description="Sort key; '-' reverses")
    ] = "updated",
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> RunsPage:
    """Runs, most recently updated first, filtered; ``total`` counts every match."""
    if project is not None:
        authorize(principal, "read", project)
    filters = run_service.RunFilter(
        project=project or project_filter(principal),
        status=status,
        search=q,
        limit=limit,
        offset=offset,
        verdict=verdict,
        order=order,
        tags=tuple(tag or ()),
        updated_after=updated_after,
        updated_before=updated_before,
        name=name,
    )

    def page(session: Session) -> RunsPage:
        rows, total = run_service.list_runs(session=session, filters=filters)
        tags = tag_service.tags_by_run(session, [run.id for run, _ in rows])
        return RunsPage(
            items=[run_summary(run, in_project, tags.get(run.id, [])) for run, in_project in rows],
            total=total,
            limit=limit,
            offset=offset,
        )

    return await read_in_session(request, page)


@router.get("/{run_id}", response_model=RunDetail)
def get_run(run_id: int, session: SessionDep, principal: Reader) -> RunDetail:
    run = _get_run(session, run_id)
    authorize(principal, "read", run.project.name)
    summary = run_summary(run, run.project.name, tag_service.tags_of(session, run_id))
    return RunDetail(
        **summary.model_dump(),
        config=run.config or {},
        segments=[
            SegmentOut.model_validate(s)
            for s in run_service.segments(session=session, run_id=run_id)
        ],
        checkpoints=[
            checkpoint_out(c) for c in run_service.checkpoints(session=session, run_id=run_id)
        ],
        metrics=[
            SeriesOut.model_validate(s) for s in run_service.series(session=session, run_id=run_id)
        ],
    )


@router.get("/{run_id}/findings", response_model=FindingsOut)
def get_findings(
    run_id: int,
    session: SessionDep,
    principal: Reader,
    severity: Annotated[str | None, Query(pattern="^(info|warning|critical)$")] = None,
    kind: str | None = None,
) -> FindingsOut:
    """What the analyzers found, ordered by step."""
    run = _get_run(session, run_id)
    authorize(principal, "read", run.project.name)
    items = finding_service.list_findings(
        session=session, run_id=run_id, severity=severity, kind=kind
    )
    return FindingsOut(
        run_id=run_id,
        verdict=run.verdict,
        findings=[FindingOut(**finding_service.finding_dict(f)) for f in items],
    )


@router.get("/{run_id}/verdict", response_model=VerdictOut)
async def get_verdict(run_id: int, request: Request, principal: Reader) -> Response:
    """``pass``, ``warn`` or ``fail``, the suspect resumes with repair advice, and whether each
    checkpoint is safe to resume from or promote. ``verdict`` is null until analysed."""
    # the JSON of a VerdictOut, kept while the run is unchanged (app.api.verdict_cache)
    cache = verdict_cache(request.app)

    def verdict_json(session: Session) -> bytes:
        stamp = run_stamp(session, run_id)
        if stamp is None:
            raise HTTPException(status_code=404, detail=f"run {run_id} not found")
        authorize(principal, "read", stamp.project)
        body = cache.get(run_id, stamp.version)
        if body is None:
            run = _get_run(session, run_id)
            summary = finding_service.verdict_summary(session=session, run=run)
            body = VERDICT.dump_json(VERDICT.validate_python(summary), by_alias=True)
            cache.put(run_id, stamp.version, body)
        return body

    return Response(await read_in_session(request, verdict_json), media_type="application/json")


@router.get("/{run_id}/telemetry")
def get_run_telemetry(
    run_id: int,
    session: SessionDep,
    principal: Reader,
    metric: Annotated[str, Query(description="Canonical metric, e.g. power, gpu_util")] = "power",
    max_points: Annotated[int, Query(ge=0, le=100_000)] = 2000,
) -> Response:
    """The GPUs the run declared (config ``telemetry``), on its wall-clock window, each point
    mapped to the training step logged at that time (``steps``; null outside the logged range)."""
    run = _get_run(session, run_id)
    authorize(principal, "read", run.project.name)
    span = run_telemetry.window(run)
    axis = run_telemetry.step_axis(session, run)
    series = []
    if span is not None:
        for item in run_telemetry.run_series(session, run, metric):
            data = series_payload(session, item, *span, max_points)
            data["steps"] = run_telemetry.to_steps(np.asarray(data["times"]), axis)
            series.append(data)
    body = {
        "run_id": run_id,
        "metric": metric,
        "declared": run_telemetry.spec(run, session),
        "window": span,
        "series": series,
    }
    return Response(
        orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), media_type="application/json"
    )


@router.get("/{run_id}/metrics", response_model=list[SeriesOut])
def list_metrics(run_id: int, session: SessionDep, principal: Reader) -> list[SeriesOut]:
    """The run's metric series (train, then eval) with point counts and value ranges."""
    run = _get_run(session, run_id)
    authorize(principal, "read", run.project.name)
    return [SeriesOut.model_validate(s) for s in run_service.series(session=session, run_id=run_id)]


@router.get("/{run_id}/metrics/{key:path}", response_model=MetricOut)
def get_metric(
    run_id: int,
    key: str,
    session: SessionDep,
    principal: Reader,
    max_points: Annotated[
        int, Query(ge=0, le=1_000_000, description="0 returns every point")
    ] = 2000,
    superseded: Annotated[
        bool, Query(description="Also return points a later segment logged again")
    ] = False,
) -> Response:
    """The effective history of one metric (latest segment per step), sorted by step.

    Downsampling keeps each bucket's minimum and maximum, so a one-step spike never disappears.
    """
    run = _get_run(session, run_id)
    authorize(principal, "read", run.project.name)
    series = metric_service.find_series(session=session, run_id=run_id, key=key)
    if series is None:
        raise HTTPException(status_code=404, detail=f"run {run_id} has no metric '{key}'")
    points = metric_service.read_points(session=session, series_id=series.id)
    total = int(points.steps.size)
    if max_points and total > max_points:
        points = metric_service.downsample(points, max_points)
    body: dict[str, object] = {
        "run_id": run_id,
        "key": key,
        "num_points": total,
        "downsampled": int(points.steps.size) < total,
        "steps": points.steps,
        "values": points.values,
        "times": points.times,
        "segments": points.segments.astype(np.int64),
        "superseded": None,
    }
    if superseded:
        old = metric_service.read_points(session=session, series_id=series.id, superseded=True)
        body["superseded"] = {
            "steps": old.steps,
            "values": old.values,
            "segments": old.segments.astype(np.int64),
        }
    return Response(
        orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), media_type="application/json"
    )

"""Dashboard data: one metric of a 1M-step run, downsampled to 2,000 points (each bucket keeps
its minimum and maximum), as the API serves it.

The 1M-step metrics log of ``metrics_ingest`` is ingested into SQLite, then
``GET /api/v1/runs/{id}/metrics/loss?max_points=2000`` is timed in process (FastAPI's
TestClient, a read token, median of N requests after one warm-up): the whole series read from
its chunks and downsampled. Beside it, what the run page draws from: the min/max preview stored
with the series at ingest. Run: python -m bench dashboard_data [--quick]
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import Row, Scale, in_child
from bench.data import metrics_jsonl

MAX_POINTS = 2000
TARGET_MS = 100.0


def serve_series(folder: str, requests: int) -> dict[str, Any]:
    """Child: ingest, then time the metric endpoint and the page's preview path."""
    home = Path(tempfile.mkdtemp(prefix="runwatch-bench-"))
    os.environ["RUNWATCH_HOME"] = str(home)
    os.environ["RUNWATCH_DATABASE_URL"] = f"sqlite:///{home}/runwatch.db"
    try:
        return _serve_series(folder, requests)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _serve_series(folder: str, requests: int) -> dict[str, Any]:
    from fastapi.testclient import TestClient

    from app import migrate
    from app.api.main import create_app
    from app.config import get_settings
    from app.db import get_engine, session_scope
    from app.services import ingest as ingest_service
    from app.services import metrics as metric_service
    from app.services.sources import store_path
    from app.services.tokens import create_token

    settings = get_settings()
    engine = get_engine()
    migrate.upgrade(engine)
    source = store_path(Path(folder), settings)
    with session_scope(engine) as session:
        job_id = ingest_service.submit(
            session=session, source=source, project="bench", run_name="series"
        ).id
        _, secret = create_token(session=session, name="bench", scope="read", project=None)
    job = ingest_service.run_job(engine=engine, settings=settings, job_id=job_id)
    assert job.state == "succeeded", job.error
    client = TestClient(create_app(mount_dashboard=False))
    url = f"/api/v1/runs/{job.run_id}/metrics/loss?max_points={MAX_POINTS}"
    headers = {"Authorization": f"Bearer {secret}"}
    timings = []
    for _ in range(requests + 1):
        started = time.perf_counter()
        response = client.get(url, headers=headers)
        timings.append(time.perf_counter() - started)
        response.raise_for_status()
    body = response.json()
    preview = []
    for _ in range(requests + 1):
        started = time.perf_counter()
        with session_scope(engine) as session:
            series = metric_service.find_series(session=session, run_id=job.run_id or 0, key="loss")
            assert series is not None
            shown = metric_service.display_points(
                session=session, series=series, max_points=MAX_POINTS
            )
        preview.append(time.perf_counter() - started)
    return {
        "num_points": body["num_points"],
        "points_returned": len(body["steps"]),
        "api_ms_median": round(statistics.median(timings[1:]) * 1000, 1),
        "api_ms_all": [round(t * 1000, 1) for t in timings[1:]],
        "preview_ms_median": round(statistics.median(preview[1:]) * 1000, 1),
        "preview_points": int(shown.steps.size),
    }


def run(scale: Scale) -> list[Row]:
    folder = metrics_jsonl(scale.metric_steps)
    result = in_child(
        "bench.dashboard_data:serve_series", folder=str(folder), requests=scale.dashboard_requests
    )
    n = result["num_points"]
    return [
        Row(
            f"dashboard data: {n:,}-step metric → {result['points_returned']:,} points, API",
            f"{result['api_ms_median']:.0f} ms/request (median of {scale.dashboard_requests})",
            target=f"≤ {TARGET_MS:g} ms",
            met=result["api_ms_median"] <= TARGET_MS,
            details={"runwatch": result},
        ),
        Row(
            "dashboard data: the run page's series (stored min/max preview)",
            f"{result['preview_ms_median']:.1f} ms/request",
            details={"runwatch": result},
        ),
    ]

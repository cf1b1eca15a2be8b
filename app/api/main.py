"""The FastAPI application factory."""

from __future__ import annotations

import gc

from fastapi import FastAPI, HTTPException
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from app import __version__
from app.api import errors
from app.api.deps import SessionDep
from app.api.intake import Intake
from app.api.routes import (
    alerts,
    checkpoints,
    coverage,
    findings,
    ingest,
    jobs,
    live,
    nodes,
    runs,
    tags,
)


def create_app(mount_dashboard: bool = True) -> FastAPI:
    api = FastAPI(
        title="Runwatch",
        version=__version__,
        description="Experiment tracking that checks resumed training runs consumed the data they"
        " were designed to see, and ties loss spikes to checkpoints.",
    )
    errors.install(api)
    api.add_middleware(Intake)  # body size (and an upload's token) before the body is read
    api.include_router(ingest.router)
    api.include_router(jobs.router)
    api.include_router(runs.router)
    api.include_router(checkpoints.router)
    api.include_router(coverage.router)
    api.include_router(tags.router)
    api.include_router(findings.router)
    api.include_router(live.router)
    api.include_router(nodes.router)
    api.include_router(alerts.router)

    @api.get("/api/v1/health", tags=["health"])
    def health(session: SessionDep) -> dict[str, str]:
        """``ok`` when the database answers; 503 otherwise."""
        try:
            session.execute(text("SELECT 1"))
        except SQLAlchemyError:
            raise HTTPException(503, "database unavailable", {"Retry-After": "5"}) from None
        return {"status": "ok"}

    if mount_dashboard:
        from a2wsgi import WSGIMiddleware

        from app.api.dashboard import DashboardGate
        from app.api.dashboard import router as login_router
        from frontend.app import create_dash

        api.include_router(login_router)
        api.mount("/", DashboardGate(WSGIMiddleware(create_dash().server)))  # type: ignore[arg-type]
    return api


def create_served_app() -> FastAPI:
    """``create_app`` for ``runwatch serve``, called in each uvicorn process.

    The modules loaded by then (the analysis imports torch when installed) make hundreds of
    thousands of objects that live as long as the process; a full garbage collection walking
    them took about 0.2 s and stalled every request in flight. Frozen, collections skip them.
    """
    api = create_app()
    gc.collect()
    gc.freeze()
    return api

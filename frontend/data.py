"""The dashboard's only way to the data: short read-only sessions over the services, and what
the logged-in token may see."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import flask
from sqlalchemy.orm import Session

from app.api.dashboard import PRINCIPAL
from app.db import get_engine, session_scope
from app.services.dashboard import RunView


@contextmanager
def reading() -> Iterator[Session]:
    with session_scope(get_engine()) as session:
        yield session


def visible_project() -> str | None:
    """The one project the logged-in token reaches; None: every project (or public reads).

    The login gate in front of the dashboard (app/api/dashboard.py) leaves the caller in the
    ASGI scope, which reaches Flask's environ through the WSGI adapter."""
    if not flask.has_request_context():
        return None
    principal = (flask.request.environ.get("asgi.scope") or {}).get(PRINCIPAL)
    return principal.project if principal is not None else None


def visible(view: RunView | None) -> RunView | None:
    """``view``, unless the logged-in token does not reach its project."""
    scoped = visible_project()
    if view is None or scoped is None or view.run["project"] == scoped:
        return view
    return None

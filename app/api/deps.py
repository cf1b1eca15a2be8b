"""Dependencies declared once and reused by every router."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

from fastapi import Depends, FastAPI
from sqlalchemy.orm import Session

from app.config import Settings, get_settings
from app.db import get_engine, session_scope


def get_session() -> Iterator[Session]:
    with session_scope(get_engine()) as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(get_settings)]


# Middleware runs outside dependency injection; these honour the app's dependency_overrides
# so it sees the same database and settings as the routes.


def app_settings(app: FastAPI) -> Settings:
    provider = app.dependency_overrides.get(get_settings, get_settings)
    settings: Settings = provider()
    return settings


@contextmanager
def app_session(app: FastAPI) -> Iterator[Session]:
    provider = app.dependency_overrides.get(get_session, get_session)
    with contextmanager(provider)() as session:
        yield session

"""Dependencies declared once and reused by every router."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Annotated, TypeVar

from fastapi import Depends, FastAPI, Request
from sqlalchemy.orm import Session

from app.config import Settings, get_settings
from app.db import get_engine, session_scope


def get_session() -> Iterator[Session]:
    with session_scope(get_engine()) as session:
        yield session


async def current_settings(request: Request) -> Settings:
    """``get_settings`` (or the app's override of it) without a trip to the threadpool."""
    return app_settings(request.app)


T = TypeVar("T")

SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(current_settings)]


# Middleware and code outside dependency injection: these honour the app's dependency_overrides
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


READERS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="runwatch-read")


async def read_in_session(request: Request, work: Callable[[Session], T]) -> T:
    """``work(session)``, a few short reads, in a transaction like ``SessionDep``'s.

    For the hot read routes (async): one trip to a thread per request, on a small pool of its
    own. A sync route taking ``SessionDep`` makes four trips (opening the session, the route,
    validating its answer, closing it) to a pool of up to 40 threads; under load those threads
    contend for the GIL with the event loop, which cost more CPU than the queries and made the
    slowest requests wait longest.
    """
    context = contextvars.copy_context()
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(READERS, context.run, _in_session, request.app, work)


def _in_session(app: FastAPI, work: Callable[[Session], T]) -> T:
    with app_session(app) as session:
        return work(session)

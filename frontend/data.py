"""The dashboard's only way to the data: short read-only sessions over the services."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.orm import Session

from app.db import get_engine, session_scope


@contextmanager
def reading() -> Iterator[Session]:
    with session_scope(get_engine()) as session:
        yield session

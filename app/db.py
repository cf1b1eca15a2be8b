"""Engine and the one transaction helper shared by the API, the CLI and the workers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import orjson
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from app.config import get_settings

PG_CONNECT_TIMEOUT_S = 5


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=60000")
    cur.close()


def _json_loads(text: str | bytes) -> Any:
    """JSON columns decoded by orjson; what it refuses (NaN written by ``json.dumps``, integers
    past 64 bits) falls back to the standard parser, so every value reads back the same."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            from pathlib import Path

            Path(path).parent.mkdir(parents=True, exist_ok=True)
        # A file database keeps a connection per concurrent request (up to the API's 40 threads):
        # past pool_size a connection is closed when returned, and opening one again (with its
        # pragmas) cost more than the request itself under load.
        pool = {"pool_size": 16, "max_overflow": 24} if path and path != ":memory:" else {}
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 60},
            json_deserializer=_json_loads,
            **pool,
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(  # a database that is away fails a request fast: the API answers 503
        url,
        pool_pre_ping=True,
        pool_size=10,
        max_overflow=20,
        connect_args={"connect_timeout": PG_CONNECT_TIMEOUT_S},
        json_deserializer=_json_loads,
    )


@lru_cache
def get_engine(url: str | None = None) -> Engine:
    return make_engine(url or get_settings().sqlalchemy_url)


def session_factory(engine: Engine | None = None) -> sessionmaker[Session]:
    return sessionmaker(bind=engine or get_engine(), expire_on_commit=False)


@contextmanager
def session_scope(engine: Engine | None = None) -> Iterator[Session]:
    """Commit on success, roll back on error, always close.

    The session is made directly: a ``sessionmaker`` builds a new Session subclass each time it is
    created, which cost more than the queries of a small API request."""
    session = Session(bind=engine or get_engine(), expire_on_commit=False)
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()

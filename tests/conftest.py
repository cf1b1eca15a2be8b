"""Shared fixtures: databases on both backends, a Redis broker, real worker processes.

PostgreSQL and Redis must be running (``scripts/test`` starts them); tests that need them fail,
never skip, when they are missing. Override the addresses with RUNWATCH_TEST_PG_ADMIN_URL and
RUNWATCH_TEST_REDIS_URL.
"""

from __future__ import annotations

import os
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text

from app import migrate
from app.config import Settings
from app.db import make_engine
from app.models import Base

PG_ADMIN_URL = os.environ.get(
    "RUNWATCH_TEST_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
REDIS_URL = os.environ.get("RUNWATCH_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
EXAMPLES_ARCHIVE = Path(__file__).parent / "data" / "example_runs.tar.gz"
BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(scope="session")
def example_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The twelve labelled example runs (real training with injected resume faults)."""
    root = tmp_path_factory.mktemp("examples")
    with tarfile.open(EXAMPLES_ARCHIVE) as tar:
        tar.extractall(root, filter="data")
    return root / "runs"


@pytest.fixture(scope="session")
def pg_database_url() -> Iterator[str]:
    """A throw-away PostgreSQL database for this test session, migrated to head."""
    name = f"runwatch_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"),
                {"n": name},
            )
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()


@pytest.fixture(scope="session")
def _migrated_pg(pg_database_url: str) -> Iterator[Engine]:
    engine = make_engine(pg_database_url)
    migrate.upgrade(engine)
    yield engine
    engine.dispose()


def empty_tables(engine: Engine) -> None:
    tables = list(reversed(Base.metadata.sorted_tables))
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(
                text(f"TRUNCATE {', '.join(t.name for t in tables)} RESTART IDENTITY CASCADE")
            )
        else:
            for table in tables:
                conn.execute(table.delete())


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def database_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'runwatch.db'}"
    request.getfixturevalue("_migrated_pg")
    return str(request.getfixturevalue("pg_database_url"))


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    """A migrated, empty database on the parametrized backend."""
    engine = make_engine(database_url)
    if engine.dialect.name == "sqlite":
        migrate.upgrade(engine)
    else:
        empty_tables(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    return Settings(home=tmp_path / "home", database_url=database_url)

"""Service endpoints for the integration tests: each backend with its real broker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from tests.conftest import REDIS_URL
from tests.procs import runwatch, runwatch_env


@pytest.fixture
def broker_url(backend: str, tmp_path: Path) -> str:
    """Embedded file-system broker with SQLite; Redis (emptied first) with PostgreSQL."""
    if backend == "sqlite":
        return ""
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    client.close()
    return REDIS_URL


@pytest.fixture
def service_env(
    tmp_path: Path, database_url: str, broker_url: str, engine: object
) -> dict[str, str]:
    """Environment for runwatch processes on the parametrized backend (schema already migrated)."""
    settings = {"home": str(tmp_path / "home"), "database_url": database_url}
    if broker_url:
        settings["broker_url"] = broker_url
    return runwatch_env(**settings)


@pytest.fixture
def api_token(service_env: dict[str, str]) -> str:
    """A write token reaching every project, made as an operator would: `runwatch tokens create`."""
    made = runwatch("tokens", "create", "tests", "--scope", "write", "--json", env=service_env)
    assert made.returncode == 0, made.stderr
    return str(json.loads(made.stdout)["token"])

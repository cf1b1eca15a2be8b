"""Schemathesis against the served OpenAPI schema: generated requests to every operation, with
a valid admin token and without one, never get a server error, and documented responses match
their schemas. The server is a real ``runwatch serve`` (API, dashboard and worker) holding
example runs, so generated ids sometimes hit real runs, checkpoints and jobs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from app.db import make_engine, session_scope
from app.services.tokens import create_token
from tests.conftest import BACKENDS, REDIS_URL, empty_tables
from tests.procs import background, free_port, runwatch, runwatch_env, wait_http

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", params=BACKENDS)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, example_runs: Path
) -> Iterator[dict[str, str]]:
    root = tmp_path_factory.mktemp("fuzz")
    settings = {
        "home": str(root / "home"),
        "alert_timeout_s": "1",  # generated channels point nowhere; do not wait on them
        "max_upload_bytes": str(1 << 20),
    }
    database_url = f"sqlite:///{root / 'home' / 'runwatch.db'}"
    if request.param == "postgresql":
        database_url = request.getfixturevalue("pg_database_url")
        empty_tables(request.getfixturevalue("_migrated_pg"))
        broker = redis.Redis.from_url(REDIS_URL)
        broker.flushdb()
        broker.close()
        settings.update(database_url=database_url, broker_url=REDIS_URL)
    env = runwatch_env(**settings)
    port = free_port()
    log = root / "serve.log"
    with background(["serve", "--worker", "--port", str(port)], env, log) as proc:
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/api/v1/health", proc, log)
        runs = [str(example_runs / n) for n in ("megatron_offset", "stall_on_save")]
        result = runwatch("ingest", *runs, "--project", "fuzz", "--wait", env=env, timeout=300)
        assert result.returncode == 0, result.stderr
        engine = make_engine(database_url)
        with session_scope(engine) as session:
            _, token = create_token(session=session, name="fuzz", scope="admin", project=None)
        engine.dispose()
        yield {"base": base, "token": token}
        assert proc.poll() is None, "the server died under generated requests"


CHECKS = [not_a_server_error, response_schema_conformance]
FUZZ = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
    database=None,
)


def _fuzz(
    base: str, headers: dict[str, str], examples: int, checks: list[Any]
) -> tuple[dict[str, str], int]:
    """Run every operation of the served schema; returns failures by operation and how many
    requests were sent."""
    schema = schemathesis.openapi.from_url(f"{base}/openapi.json")
    failures: dict[str, str] = {}
    sent = 0
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 24, [op.label for op in operations]
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(FUZZ, max_examples=examples)
        def exercise(case: Any) -> None:
            nonlocal sent
            sent += 1
            response = case.call_and_validate(base_url=base, headers=headers, checks=checks)
            if not headers and case.path != "/api/v1/health":
                assert response.status_code in (401, 404, 405, 413, 422), response.status_code

        try:
            exercise()
        except Exception as exc:  # collected so one run reports every failing operation
            failures[operation.label] = f"{type(exc).__name__}: {exc}"[:2000]
    return failures, sent


def test_with_a_token_no_server_errors(served: dict[str, str]) -> None:
    headers = {"Authorization": f"Bearer {served['token']}"}
    failures, sent = _fuzz(served["base"], headers, 25, CHECKS)
    print(f"schemathesis: {sent} requests with an admin token")
    assert sent > 300
    assert not failures, "\n\n".join(f"{k}\n{v}" for k, v in failures.items())


def test_without_a_token_no_server_errors(served: dict[str, str]) -> None:
    failures, sent = _fuzz(served["base"], {}, 5, [not_a_server_error])
    print(f"schemathesis: {sent} requests without a token")
    assert not failures, "\n\n".join(f"{k}\n{v}" for k, v in failures.items())

"""With the database unreachable, every kind of request answers 503 with the error body, fast:
routes, the health check, the dashboard's gate and the upload check made before the body is
read (a middleware, outside the app's exception handlers). tests/reliability/test_outages.py
stops a real PostgreSQL for 30 s; this is the same in process."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.db import make_engine
from tests.api.access import bearer, make_api
from tests.procs import free_port

REQUESTS = [
    ("GET", "/api/v1/runs", {}),
    ("GET", "/api/v1/health", {}),
    ("POST", "/api/v1/runs", {"json": {"project": "p", "name": "n"}}),
    ("POST", "/api/v1/ingest", {"files": {"file": ("m.jsonl", b"{}\n")}, "data": {"project": "p"}}),
    ("GET", "/runs", {}),
]


@pytest.mark.parametrize(("method", "path", "body"), REQUESTS)
def test_every_request_answers_503_while_the_database_is_unreachable(
    tmp_path: Path, method: str, path: str, body: dict[str, object]
) -> None:
    url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/gone"  # nothing listens
    engine = make_engine(url)
    api = make_api(engine, Settings(home=tmp_path, database_url=url), dashboard=True)
    with TestClient(api, raise_server_exceptions=False) as client:
        started = time.monotonic()
        response = client.request(method, path, headers=bearer("rwt_" + "x" * 40), **body)
        elapsed = time.monotonic() - started
    engine.dispose()
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "unavailable"
    assert response.headers["Retry-After"] == "5"
    assert elapsed < 5

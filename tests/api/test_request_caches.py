"""The API's in-process caches: a live token is remembered for the TTL only (a revoked one is
refused once it has passed, at once with TTL 0; unknown tokens are never remembered), and a kept
verdict is never older than the run's stored data (re-analysis, re-ingest)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from app.api.schemas import VerdictOut
from app.api.token_cache import TokenCache
from app.api.verdict_cache import VerdictCache
from app.config import Settings
from app.db import session_scope
from app.services import analysis as analysis_service
from app.services import findings as finding_service
from app.services import runs as run_service
from app.services.findings import verdict_summary
from app.services.tokens import authenticate, revoke
from tests.api.access import Tokens, bearer, make_api
from tests.helpers import ingest_path


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _revoke(engine: Engine, secret: str) -> None:
    with session_scope(engine) as session:
        token = authenticate(session=session, secret=secret)
        assert token is not None
        revoke(session=session, token_id=token.id)


def test_a_revoked_token_is_refused_once_the_ttl_has_passed(
    engine: Engine, settings: Settings, tokens: Tokens
) -> None:
    clock = Clock()
    api = make_api(engine, settings)
    api.state.token_cache = TokenCache(ttl_s=5, clock=clock)
    client = TestClient(api, headers=bearer(tokens.read_all))
    assert client.get("/api/v1/runs").status_code == 200
    _revoke(engine, tokens.read_all)
    clock.now += 4.9
    assert client.get("/api/v1/runs").status_code == 200  # remembered, within the TTL
    clock.now += 0.1
    refused = client.get("/api/v1/runs")
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
    assert client.get("/api/v1/runs").status_code == 401  # refusals are not remembered


def test_ttl_zero_checks_the_database_on_every_request(
    engine: Engine, settings: Settings, tokens: Tokens
) -> None:
    api = make_api(engine, settings)
    api.state.token_cache = TokenCache(ttl_s=0)
    client = TestClient(api, headers=bearer(tokens.write_all))
    assert client.get("/api/v1/runs").status_code == 200
    _revoke(engine, tokens.write_all)
    assert client.get("/api/v1/runs").status_code == 401
    upload = client.post("/api/v1/ingest", files={"file": ("m.jsonl", b"{}\n")})
    assert upload.status_code == 401  # the check made before the body is read, too


def test_the_token_cache_remembers_only_live_tokens_and_few_of_them() -> None:
    clock = Clock()
    cache: TokenCache[str] = TokenCache(ttl_s=5, max_entries=3, clock=clock)
    for n in range(5):
        cache.put(f"rwt_{n}", f"caller {n}")
    assert [cache.get(f"rwt_{n}") for n in range(5)] == [
        None,
        None,
        "caller 2",
        "caller 3",
        "caller 4",
    ]
    clock.now += 5
    assert cache.get("rwt_4") is None
    assert TokenCache(ttl_s=0).get("rwt_4") is None


def test_a_kept_verdict_follows_reanalysis_and_reingest(
    engine: Engine,
    settings: Settings,
    tokens: Tokens,
    example_runs: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = ingest_path(engine, settings, example_runs / "exact_resume", project="alpha", run="r")
    assert job.state == "succeeded" and job.run_id is not None
    run_id = job.run_id
    api = make_api(engine, settings)
    client = TestClient(api, headers=bearer(tokens.read_alpha))
    url = f"/api/v1/runs/{run_id}/verdict"
    built = []

    def counted(**kwargs: Any) -> dict[str, Any]:
        built.append(kwargs["run"].id)
        return verdict_summary(**kwargs)

    monkeypatch.setattr(finding_service, "verdict_summary", counted)

    first = client.get(url)
    assert first.status_code == 200 and first.json()["verdict"] == "pass"
    assert client.get(url).content == first.content
    assert built == [run_id]  # the second answer was the kept one

    with session_scope(engine) as session:
        analysis_service.analyze(session=session, run_id=run_id)
    again = client.get(url).json()
    assert again["analyzed_at"] != first.json()["analyzed_at"] and len(built) == 2

    job = ingest_path(engine, settings, example_runs / "megatron_offset", project="alpha", run="r")
    assert job.state == "succeeded" and job.run_id == run_id
    replaced = client.get(url).json()
    assert replaced["verdict"] == "fail"
    assert replaced == _uncached(engine, run_id)
    assert client.get(url, headers=bearer(tokens.read_all)).json() == replaced
    beta = client.get(url, headers=bearer(tokens.write_beta))
    assert beta.status_code == 403  # a kept verdict is still authorized per caller
    assert client.get(f"/api/v1/runs/{run_id + 1000}/verdict").status_code == 404


def test_the_verdict_cache_keeps_the_most_recently_used_runs() -> None:
    cache = VerdictCache(max_runs=2)
    cache.put(1, ("a",), b"1")
    cache.put(2, ("a",), b"2")
    assert cache.get(1, ("a",)) == b"1"
    cache.put(3, ("a",), b"3")
    assert cache.get(2, ("a",)) is None and cache.get(1, ("a",)) == b"1"
    assert cache.get(1, ("b",)) is None  # another version of the run: rebuilt


def _uncached(engine: Engine, run_id: int) -> dict[str, object]:
    with session_scope(engine) as session:
        run = run_service.get_run(session=session, run_id=run_id)
        assert run is not None
        summary = VerdictOut.model_validate(verdict_summary(session=session, run=run))
        return summary.model_dump(mode="json")

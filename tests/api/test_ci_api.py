"""The API a CI pipeline calls: run filters, per-checkpoint verdicts, coverage, findings, jobs,
tags, pagination and one error body shape — on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from app.config import Settings
from app.db import session_scope
from app.services.tokens import create_token
from tests.api.access import make_api
from tests.helpers import ingest_path


@pytest.fixture
def client(engine: Engine, settings: Settings, example_runs: Path) -> Iterator[TestClient]:
    for name in ("megatron_offset", "exact_resume"):
        assert ingest_path(engine, settings, example_runs / name, project="ci").state == "succeeded"
    with session_scope(engine) as session:
        _, secret = create_token(session=session, name="ci", scope="write", project="ci")

    api = make_api(engine, settings)
    with TestClient(api, headers={"Authorization": f"Bearer {secret}"}) as client:
        yield client


def _run_id(client: TestClient, name: str) -> int:
    (run,) = client.get("/api/v1/runs", params={"name": name}).json()["items"]
    return int(run["id"])


def test_checkpoint_verdict_says_whether_to_promote(client: TestClient) -> None:
    bad, good = _run_id(client, "megatron_offset"), _run_id(client, "exact_resume")
    after_drift = client.get(f"/api/v1/runs/{bad}/checkpoints/step_000400").json()
    assert after_drift["safe"] is False and after_drift["run_verdict"] == "fail"
    assert after_drift["reasons"] and after_drift["checkpoint"]["step"] == 400
    by_step = client.get(f"/api/v1/runs/{bad}/checkpoints/300").json()
    assert by_step["checkpoint"]["name"] == "step_000300" and by_step["safe"] is True
    assert client.get(f"/api/v1/runs/{good}/checkpoints/step_000400").json()["safe"] is True
    listed = client.get(f"/api/v1/runs/{bad}/checkpoints").json()["items"]
    assert [c["step"] for c in listed] == sorted(c["step"] for c in listed)
    assert {c["verdict"] for c in listed} == {"safe", "unsafe"}
    missing = client.get(f"/api/v1/runs/{bad}/checkpoints/step_999999")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    assert "step_999999" in missing.json()["error"]["message"]


def test_coverage_summary_counts_what_the_bad_resume_skipped(client: TestClient) -> None:
    bad, good = _run_id(client, "megatron_offset"), _run_id(client, "exact_resume")
    coverage = client.get(f"/api/v1/runs/{bad}/coverage").json()
    assert coverage["dataset_size"] == 1797 and coverage["grid"] is None
    late = [e for e in coverage["epochs"] if e["first_step"] > 300 and e["complete"]]
    assert late and all(e["unseen"] > 500 for e in late)
    assert coverage["unseen"] == sum(e["unseen"] for e in coverage["epochs"])
    clean = client.get(f"/api/v1/runs/{good}/coverage", params={"grid": True}).json()
    # 1,797 samples in batches of 32 with drop_last: 5 left out of every epoch by design
    assert {(e["unseen"], e["repeated"]) for e in clean["epochs"]} == {(5, 0)}
    assert clean["grid"]["index_edges"][-1] == 1797


def test_runs_filter_by_tag_time_and_name(client: TestClient) -> None:
    bad = _run_id(client, "megatron_offset")
    tagged = client.patch(f"/api/v1/runs/{bad}/tags", json={"add": ["7b", "resumed", "7b"]})
    assert tagged.status_code == 200 and tagged.json()["tags"] == ["7b", "resumed"]
    page = client.get("/api/v1/runs", params=[("tag", "7b"), ("tag", "resumed")]).json()
    assert [r["name"] for r in page["items"]] == ["megatron_offset"]
    assert page["items"][0]["tags"] == ["7b", "resumed"]
    assert client.get("/api/v1/runs", params=[("tag", "7b"), ("tag", "x")]).json()["total"] == 0
    client.patch(f"/api/v1/runs/{bad}/tags", json={"remove": ["resumed"]})
    assert client.get(f"/api/v1/runs/{bad}/tags").json()["tags"] == ["7b"]
    future = client.get("/api/v1/runs", params={"updated_after": "2999-01-01T00:00:00Z"})
    assert future.json()["total"] == 0
    assert client.get("/api/v1/runs", params={"updated_before": "2999-01-01"}).json()["total"] == 2
    first = client.get("/api/v1/runs", params={"limit": 1, "order": "name"}).json()
    second = client.get("/api/v1/runs", params={"limit": 1, "offset": 1, "order": "name"}).json()
    assert first["total"] == second["total"] == 2
    assert [first["items"][0]["name"], second["items"][0]["name"]] == [
        "exact_resume",
        "megatron_offset",
    ]
    bad_tag = client.patch(f"/api/v1/runs/{bad}/tags", json={"add": ["a\nb"]})
    assert bad_tag.status_code == 422 and bad_tag.json()["error"]["code"] == "invalid"


def test_findings_and_jobs_listings_paginate(client: TestClient) -> None:
    critical = client.get("/api/v1/findings", params={"min_severity": "critical"}).json()
    assert {(f["run_name"], f["kind"], f["resume_from_step"]) for f in critical["items"]} == {
        ("megatron_offset", "resume_data_drift", 300)
    }
    everything = client.get("/api/v1/findings", params={"limit": 1000}).json()
    assert everything["total"] >= critical["total"]
    paged = client.get("/api/v1/findings", params={"limit": 1, "offset": 0}).json()
    assert len(paged["items"]) == 1 and paged["total"] == everything["total"]
    jobs = client.get("/api/v1/jobs", params={"project": "ci"}).json()
    assert jobs["total"] == 2 and {j["state"] for j in jobs["items"]} == {"succeeded"}
    assert client.get("/api/v1/jobs", params={"state": "failed"}).json()["total"] == 0


def test_metric_series_are_listed(client: TestClient) -> None:
    bad = _run_id(client, "megatron_offset")
    series = {s["key"]: s for s in client.get(f"/api/v1/runs/{bad}/metrics").json()}
    assert {"loss", "lr"} <= set(series)
    assert series["loss"]["num_points"] == 840 and series["loss"]["last_step"] == 840
    points = client.get(f"/api/v1/runs/{bad}/metrics/loss", params={"max_points": 0}).json()
    assert points["num_points"] == len(points["steps"]) == 840


def test_errors_share_one_body(client: TestClient) -> None:
    missing = client.get("/api/v1/runs/999999/coverage")
    assert missing.status_code == 404
    assert missing.json() == {
        "error": {
            "status": 404,
            "code": "not_found",
            "message": "run 999999 not found",
            "details": [],
        }
    }
    invalid = client.get("/api/v1/runs", params={"limit": 0})
    assert invalid.status_code == 422
    error = invalid.json()["error"]
    assert error["code"] == "invalid" and error["message"].startswith("query.limit")
    assert error["details"][0]["loc"] == ["query", "limit"]

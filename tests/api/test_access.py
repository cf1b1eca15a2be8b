"""Access control through the API: every write operation refuses a missing, wrong, revoked,
read-only, cookie-only or other-project token and changes nothing; the right token succeeds.
Reads need a token unless the deployment has public reads; a project-scoped token sees its
project only. Uploads are refused by size and token before their body is read."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy import Engine

from app.api import routes
from app.config import Settings
from tests.api.access import Seeded, Tokens, bearer, make_api, row_counts, seed

WRITE_METHODS = {"post", "put", "patch", "delete"}
METRIC = {"file": "metrics", "data": {"step": 1, "loss": 1.0}}


@dataclass(frozen=True)
class Call:
    """A valid request for one write operation. ``path`` is formatted with the seeded ids;
    ``project`` is the project it writes to (None: a resource outside any project); ``scope``
    the scope it needs."""

    path: str
    ok: int
    json: dict[str, Any] | None = None
    form: dict[str, str] = field(default_factory=dict)
    upload: bool = False
    project: str | None = "alpha"
    scope: str = "write"


# Every POST/PUT/PATCH/DELETE operation of the API with a sample request. A new write route
# needs an entry here: test_every_write_operation_has_a_sample_request fails until it has one.
WRITES: dict[tuple[str, str], Call] = {
    ("POST", "/api/v1/ingest"): Call(
        "/api/v1/ingest", 202, form={"project": "alpha", "run": "uploaded"}, upload=True
    ),
    ("POST", "/api/v1/runs"): Call("/api/v1/runs", 201, json={"project": "alpha", "name": "new"}),
    ("POST", "/api/v1/runs/{run_id}/events"): Call(
        "/api/v1/runs/{run_id}/events", 202, json={"logger": "l", "batch": 1, "records": [METRIC]}
    ),
    ("PATCH", "/api/v1/runs/{run_id}/tags"): Call(
        "/api/v1/runs/{run_id}/tags", 200, json={"add": ["nightly"]}
    ),
    ("POST", "/api/v1/nodes"): Call(
        "/api/v1/nodes",
        201,
        json={"name": "new-node", "url": "http://127.0.0.1:9/metrics"},
        project=None,
    ),
    ("PATCH", "/api/v1/nodes/{node_id}"): Call(
        "/api/v1/nodes/{node_id}", 200, json={"enabled": False}, project=None
    ),
    ("DELETE", "/api/v1/nodes/{node_id}"): Call("/api/v1/nodes/{node_id}", 204, project=None),
    ("POST", "/api/v1/alerts/channels"): Call(
        "/api/v1/alerts/channels",
        201,
        json={"name": "pager", "kind": "email", "recipients": ["oncall@example.com"]},
        project=None,
        scope="admin",
    ),
    ("PATCH", "/api/v1/alerts/channels/{channel_id}"): Call(
        "/api/v1/alerts/channels/{channel_id}",
        200,
        json={"enabled": False},
        project=None,
        scope="admin",
    ),
    ("DELETE", "/api/v1/alerts/channels/{channel_id}"): Call(
        "/api/v1/alerts/channels/{channel_id}", 204, project=None, scope="admin"
    ),
    ("POST", "/api/v1/alerts/channels/{channel_id}/test"): Call(
        "/api/v1/alerts/channels/{channel_id}/test", 200, project=None, scope="admin"
    ),
    ("POST", "/api/v1/alerts/rules"): Call(
        "/api/v1/alerts/rules", 201, json={"project": "alpha", "channel": "mail-{tag}"}
    ),
    ("DELETE", "/api/v1/alerts/rules/{rule_id}"): Call("/api/v1/alerts/rules/{rule_id}", 204),
    ("PUT", "/api/v1/runs/{run_id}/silence"): Call(
        "/api/v1/runs/{run_id}/silence", 200, json={"minutes": 60, "reason": "maintenance"}
    ),
    ("DELETE", "/api/v1/runs/{run_id}/silence"): Call("/api/v1/runs/{run_id}/silence", 204),
}


def write_operations(api: FastAPI) -> set[tuple[str, str]]:
    return {
        (method.upper(), path)
        for path, operations in api.openapi()["paths"].items()
        for method in operations
        if method in WRITE_METHODS
    }


def send(client: TestClient, op: tuple[str, str], ids: Seeded, headers: dict[str, str]) -> Response:
    call = WRITES[op]
    url = call.path.format(
        run_id=ids.run_id, node_id=ids.node_id, channel_id=ids.channel_id, rule_id=ids.rule_id
    )
    body = call.json
    if body is not None:  # "{tag}" in a string value: the seeded rows' tag
        body = {k: v.format(tag=ids.tag) if isinstance(v, str) else v for k, v in body.items()}
    files = {"file": ("metrics.jsonl", b'{"step": 1, "loss": 1.0}\n')} if call.upload else None
    return client.request(
        op[0], url, json=body, data=call.form or None, files=files, headers=headers
    )


@pytest.fixture(autouse=True)
def _no_queue(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Accepted writes would enqueue work; the queue path has its own end-to-end tests."""
    queued: list[int] = []
    monkeypatch.setattr(routes.ingest, "enqueue_ingest", queued.append)
    monkeypatch.setattr(routes.live, "enqueue_refresh", queued.append)
    return queued


def test_every_write_operation_has_a_sample_request(api: FastAPI) -> None:
    found = write_operations(api)
    missing = sorted(found - WRITES.keys())
    assert not missing, (
        "write operations without an entry in WRITES (tests/api/test_access.py), so nobody "
        f"checks that they refuse bad tokens: {', '.join(' '.join(op) for op in missing)}"
    )
    assert not sorted(WRITES.keys() - found), "WRITES has entries for operations that are gone"


@pytest.mark.parametrize("op", list(WRITES), ids=" ".join)
def test_write_refuses_every_wrong_token_and_accepts_the_right_one(
    op: tuple[str, str], api: FastAPI, engine: Engine, settings: Settings, tokens: Tokens
) -> None:
    ids = seed(engine, "matrix")
    call = WRITES[op]
    client = TestClient(api)
    if call.scope == "admin":
        right, narrow = tokens.admin, ("write token reaching every project", tokens.write_all)
    elif call.project is None:
        right, narrow = tokens.write_all, ("write token of one project", tokens.write_alpha)
    else:  # the narrowest token that may: the project's own write token
        right, narrow = tokens.write_alpha, ("write token of another project", tokens.write_beta)
    refused = {
        "no token": ({}, 401),
        "wrong token": (bearer("rwt_" + "x" * 43), 401),
        "not a token": ({"Authorization": "Basic dXNlcjpwYXNz"}, 401),
        "revoked token": (bearer(tokens.revoked), 401),
        "the right token, but in the dashboard cookie": (
            {"Cookie": f"runwatch_token={right}"},
            401,
        ),
        "read-only token": (bearer(tokens.read_all), 403),
        "read-only token of the project": (bearer(tokens.read_alpha), 403),
        narrow[0]: (bearer(narrow[1]), 403),
    }
    before = row_counts(engine)
    stored_before = _stored_sources(settings)
    for what, (headers, status) in refused.items():
        answer = send(client, op, ids, headers)
        assert answer.status_code == status, f"{what}: {answer.status_code} {answer.text}"
        error = answer.json()["error"]
        assert error["status"] == status and error["message"], what
        if status == 401:
            assert answer.headers["www-authenticate"] == "Bearer", what
    assert row_counts(engine) == before, "a refused write changed the database"
    assert _stored_sources(settings) == stored_before, "a refused upload was stored"

    answer = send(client, op, ids, bearer(right))
    assert answer.status_code == call.ok, answer.text


def _stored_sources(settings: Settings) -> list[Path]:
    root = settings.sources_path
    return sorted(root.rglob("*")) if root.exists() else []


def read_operations(api: FastAPI) -> list[str]:
    return [
        path
        for path, operations in api.openapi()["paths"].items()
        if "get" in operations and path != "/api/v1/health"
    ]


# Reads of secrets that go outside (alert channels' URLs) need admin, public reads or not.
ADMIN_READS = {"/api/v1/alerts/channels"}


def _url(path: str, ids: Seeded) -> str:
    values = {"run_id": ids.run_id, "node_id": ids.node_id, "job_id": 1, "alert_id": 1}
    return path.format(**values, key="loss", checkpoint="step_000100")


def test_every_read_needs_a_token(api: FastAPI, engine: Engine, tokens: Tokens) -> None:
    ids = seed(engine, "reads")
    client = TestClient(api)
    paths = read_operations(api)
    assert len(paths) > 10
    for path in paths:
        for headers in ({}, bearer("rwt_" + "x" * 43), bearer(tokens.revoked)):
            answer = client.get(_url(path, ids), headers=headers)
            assert answer.status_code == 401, f"GET {path}: {answer.status_code}"
            assert answer.headers["www-authenticate"] == "Bearer"
        answer = client.get(_url(path, ids), headers=bearer(tokens.admin))
        assert answer.status_code not in (401, 403), f"GET {path}: {answer.text}"
        if path not in ADMIN_READS:
            answer = client.get(_url(path, ids), headers=bearer(tokens.read_all))
            assert answer.status_code not in (401, 403), f"GET {path}: {answer.text}"
    assert client.get("/api/v1/health").json() == {"status": "ok"}  # open: for load balancers


def test_public_reads_let_reads_through_but_not_writes(
    engine: Engine, settings: Settings, tokens: Tokens
) -> None:
    api = make_api(engine, settings.model_copy(update={"public_reads": True}))
    ids = seed(engine, "public")
    client = TestClient(api)
    for path in read_operations(api):
        answer = client.get(_url(path, ids))
        refused = path in ADMIN_READS
        assert (answer.status_code == 401) is refused, f"GET {path}: {answer.text}"
    names = {(r["project"], r["name"]) for r in client.get("/api/v1/runs").json()["items"]}
    assert names == {("alpha", "public"), ("beta", "public")}
    # a token that is presented must still be valid
    assert client.get("/api/v1/runs", headers=bearer("rwt_nope")).status_code == 401
    before = row_counts(engine)
    for op in WRITES:
        answer = send(client, op, ids, {})
        assert answer.status_code == 401, f"{' '.join(op)}: {answer.text}"
    assert row_counts(engine) == before


def test_a_project_token_reads_its_project_only(
    api: FastAPI, engine: Engine, tokens: Tokens
) -> None:
    ids = seed(engine, "scoped")
    seed(engine, "scoped-2")
    client = TestClient(api)
    for secret in (tokens.read_alpha, tokens.write_alpha):  # write includes read
        headers = bearer(secret)
        page = client.get("/api/v1/runs", headers=headers).json()
        assert {r["project"] for r in page["items"]} == {"alpha"} and page["total"] == 2
        mine = client.get("/api/v1/runs", params={"project": "alpha"}, headers=headers)
        assert mine.json()["total"] == 2
        assert client.get(f"/api/v1/runs/{ids.run_id}", headers=headers).status_code == 200
        for url in (
            f"/api/v1/runs/{ids.beta_run_id}",
            f"/api/v1/runs/{ids.beta_run_id}/verdict",
            f"/api/v1/runs/{ids.beta_run_id}/metrics/loss",
            f"/api/v1/runs/{ids.beta_run_id}/tags",
            "/api/v1/runs?project=beta",
            "/api/v1/jobs?project=beta",
            "/api/v1/findings?project=beta",
        ):
            answer = client.get(url, headers=headers)
            assert answer.status_code == 403, f"{url}: {answer.text}"
            assert answer.json()["error"]["code"] == "forbidden"
            assert "'beta'" in answer.json()["error"]["message"]
        assert client.get("/api/v1/nodes", headers=headers).status_code == 200  # no project
    every = client.get("/api/v1/runs", headers=bearer(tokens.read_all)).json()
    assert {r["project"] for r in every["items"]} == {"alpha", "beta"} and every["total"] == 4


def asgi_post(
    api: FastAPI, path: str, headers: dict[str, str], chunks: list[bytes]
) -> tuple[int, dict[str, Any], int]:
    """POST through the ASGI interface, handing the body over chunk by chunk: the status, the
    error body, and how many chunks the application asked for."""
    asked = 0
    sent: list[dict[str, Any]] = []
    pending = list(chunks)

    async def receive() -> dict[str, Any]:
        nonlocal asked
        asked += 1
        body = pending.pop(0) if pending else b""
        return {"type": "http.request", "body": body, "more_body": bool(pending)}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    anyio.run(api, scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, json.loads(body), asked


BOUNDARY = "runwatchtestboundary"
MULTIPART = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}


def multipart_chunks(size: int, chunk: int = 1024) -> list[bytes]:
    head = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="project"\r\n\r\nalpha\r\n'
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; '
        'filename="metrics.jsonl"\r\nContent-Type: application/octet-stream\r\n\r\n'
    ).encode()
    line = b'{"step": 1, "loss": 1.0}\n'
    data = line * (size // len(line) + 1)
    tail = f"\r\n--{BOUNDARY}--\r\n".encode()
    return [head] + [data[i : i + chunk] for i in range(0, len(data), chunk)] + [tail]


def test_uploads_are_refused_before_their_body_is_read(
    engine: Engine, settings: Settings, tokens: Tokens
) -> None:
    small = settings.model_copy(update={"max_upload_bytes": 16 * 1024})
    api = make_api(engine, small)
    body = multipart_chunks(64 * 1024)
    declared = {**MULTIPART, "Content-Length": str(sum(map(len, body)))}

    status, error, asked = asgi_post(api, "/api/v1/ingest", declared, body)
    assert (status, asked) == (401, 0), error
    read_only = {**declared, **bearer(tokens.read_all)}
    status, error, asked = asgi_post(api, "/api/v1/ingest", read_only, body)
    assert (status, asked) == (403, 0), error
    status, error, asked = asgi_post(
        api, "/api/v1/ingest", {**declared, **bearer(tokens.write_alpha)}, body
    )
    assert (status, asked) == (413, 0), error  # too large by its Content-Length
    assert error["error"]["code"] == "too_large" and "16384" in error["error"]["message"]

    # no Content-Length (chunked): refused as soon as the bytes received pass the limit
    status, error, asked = asgi_post(
        api, "/api/v1/ingest", {**MULTIPART, **bearer(tokens.write_alpha)}, body
    )
    assert status == 413 and error["error"]["code"] == "too_large"
    assert asked <= 16 + 2 < len(body)
    assert not small.sources_path.exists() or not any(small.sources_path.rglob("*.data"))

    # under the limit, the same upload goes through
    fits = multipart_chunks(4 * 1024)
    status, answer, _ = asgi_post(
        api, "/api/v1/ingest", {**MULTIPART, **bearer(tokens.write_alpha)}, fits
    )
    assert status == 202, answer


def test_json_bodies_are_limited_too(api: FastAPI, engine: Engine, tokens: Tokens) -> None:
    ids = seed(engine, "big")
    headers = {
        "Content-Type": "application/json",
        "Content-Length": str(65 * 1024 * 1024),
        **bearer(tokens.write_alpha),
    }
    status, error, asked = asgi_post(api, f"/api/v1/runs/{ids.run_id}/events", headers, [b"{}"])
    assert (status, asked) == (413, 0), error

"""The dashboard behind /login: without a valid cookie a page redirects to the login form and
Dash's callbacks answer 401; a good token sets an HttpOnly cookie and the dashboard renders,
showing a project-scoped token its project only."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import flask
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

import frontend.data
from app.api.auth import Principal
from app.api.dashboard import PRINCIPAL
from app.config import Settings
from app.db import session_scope
from app.services.dashboard import run_view
from app.services.tokens import authenticate, revoke
from tests.api.access import Tokens, make_api, seed

DASH_CALLBACK = "/_dash-update-component"


@pytest.fixture
def client(engine: Engine, settings: Settings) -> TestClient:
    return TestClient(make_api(engine, settings, dashboard=True), follow_redirects=False)


def test_without_a_login_pages_redirect_and_callbacks_get_401(client: TestClient) -> None:
    for page in ("/", "/nodes", "/runs/1?x=1"):
        answer = client.get(page)
        assert answer.status_code == 303, page
        assert answer.headers["location"] == f"/login?next={quote(page, safe='')}"
    for method, path in (("GET", "/_dash-layout"), ("GET", "/_dash-dependencies")):
        answer = client.request(method, path)
        assert answer.status_code == 401 and answer.json()["error"]["code"] == "unauthorized"
    callback = client.post(DASH_CALLBACK, json={"output": "x", "inputs": []})
    assert callback.status_code == 401
    form = client.get("/login")
    assert form.status_code == 200 and 'name="token"' in form.text


def test_a_bad_token_is_refused(client: TestClient, tokens: Tokens) -> None:
    for bad in ("bad", "rwt_" + "x" * 43, tokens.revoked):
        answer = client.get("/login", params={"token": bad})
        assert answer.status_code == 401 and "set-cookie" not in answer.headers
        assert "not valid" in answer.text
    assert client.get("/").status_code == 303


def test_a_good_token_logs_in_and_the_dashboard_renders(client: TestClient, tokens: Tokens) -> None:
    answer = client.get("/login", params={"token": tokens.read_alpha, "next": "/nodes"})
    assert answer.status_code == 303 and answer.headers["location"] == "/nodes"
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"runwatch_token={tokens.read_alpha};")
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie and "Path=/" in cookie
    page = client.get("/")
    assert page.status_code == 200 and "<title>Runwatch</title>" in page.text
    assert client.get("/_dash-layout").status_code == 200
    assert client.get("/api/v1/nodes").status_code == 200  # the cookie reads the API too

    out = client.get("/logout")
    assert out.status_code == 303 and out.headers["location"] == "/login"
    assert client.get("/").status_code == 303


def test_the_login_form_posts_and_never_redirects_off_site(
    client: TestClient, tokens: Tokens
) -> None:
    posted = client.post("/login", data={"token": tokens.read_all, "next": "/compare?runs=1,2"})
    assert posted.status_code == 303 and posted.headers["location"] == "/compare?runs=1,2"
    for target in ("https://evil.example/", "//evil.example/x", "javascript:alert(1)"):
        answer = client.get("/login", params={"token": tokens.read_all, "next": target})
        assert answer.headers["location"] == "/", target
    form = client.get("/login", params={"next": '"><script>alert(1)</script>'})
    assert "<script>alert(1)" not in form.text


def test_a_revoked_token_is_logged_out(client: TestClient, tokens: Tokens, engine: Engine) -> None:
    client.get("/login", params={"token": tokens.write_all})
    assert client.get("/").status_code == 200
    with session_scope(engine) as session:
        token = authenticate(session=session, secret=tokens.write_all)
        assert token is not None
        revoke(session=session, token_id=token.id)
    assert client.get("/").status_code == 303


def test_public_reads_open_the_dashboard(engine: Engine, settings: Settings) -> None:
    public = settings.model_copy(update={"public_reads": True})
    client = TestClient(make_api(engine, public, dashboard=True), follow_redirects=False)
    assert client.get("/").status_code == 200
    assert client.get("/_dash-layout").status_code == 200


def _runs_table(client: TestClient, project: str | None) -> dict[str, Any]:
    """Dash's callback for the runs table, as the browser sends it."""
    outputs = [
        ("runs-table", "children"),
        ("runs-range", "children"),
        ("runs-prev", "disabled"),
        ("runs-next", "disabled"),
    ]
    inputs = [
        ("runs-offset", "data", 0),
        ("runs-search", "value", None),
        ("runs-project", "value", project),
        ("runs-verdict", "value", None),
        ("runs-status", "value", None),
        ("runs-sort", "value", "updated"),
    ]
    body = {
        "output": ".." + "...".join(f"{i}.{p}" for i, p in outputs) + "..",
        "outputs": [{"id": i, "property": p} for i, p in outputs],
        "inputs": [{"id": i, "property": p, "value": v} for i, p, v in inputs],
        "changedPropIds": [],
        "state": [],
    }
    answer = client.post(DASH_CALLBACK, json=body)
    assert answer.status_code == 200, answer.text
    return dict(answer.json()["response"])


def test_a_project_token_sees_its_project_in_the_dashboard(
    client: TestClient, tokens: Tokens, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(frontend.data, "get_engine", lambda: engine)
    ids = seed(engine, "dash")
    client.get("/login", params={"token": tokens.read_alpha})
    for asked in (None, "beta"):  # asking for another project shows this one all the same
        shown = _runs_table(client, asked)
        assert shown["runs-range"]["children"] == "1-1 of 1"
        assert "'alpha'" in repr(shown["runs-table"]) and "'beta'" not in repr(shown)

    client.get("/login", params={"token": tokens.read_all})
    assert _runs_table(client, None)["runs-range"]["children"] == "1-2 of 2"

    with session_scope(engine) as session:
        alpha = run_view(session=session, run_id=ids.run_id, telemetry_metric=None)
        beta = run_view(session=session, run_id=ids.beta_run_id, telemetry_metric=None)
    scoped = Principal(token_id=1, name="r", scope="read", project="alpha")
    environ = {"asgi.scope": {PRINCIPAL: scoped}}
    with flask.Flask(__name__).test_request_context(environ_base=environ):
        assert frontend.data.visible_project() == "alpha"
        assert frontend.data.visible(alpha) is alpha and frontend.data.visible(beta) is None
    with flask.Flask(__name__).test_request_context(environ_base={"asgi.scope": {PRINCIPAL: None}}):
        assert frontend.data.visible(beta) is beta  # public reads

"""The dashboard behind a login, the way Jupyter does it.

``/login?token=...`` (or the form at ``/login``) checks the token, keeps it in an HttpOnly,
SameSite=Lax cookie and goes on to the dashboard; ``/logout`` forgets it. Without a valid cookie
(and without ``RUNWATCH_PUBLIC_READS``) a dashboard page redirects to ``/login`` and anything else
under it (Dash's ``/_dash-*`` callbacks, assets) answers 401. Any live token may log in: the
dashboard only reads. The caller is left in the request scope (``PRINCIPAL``) so the pages can
show a project-scoped token its project only.
"""

from __future__ import annotations

import html
from typing import Annotated
from urllib.parse import quote, urlsplit

from fastapi import APIRouter, FastAPI, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.auth import COOKIE, Principal, principal_of
from app.api.deps import SessionDep, app_session, app_settings
from app.api.errors import error_response
from app.api.intake import route_path
from app.services.tokens import authenticate

PRINCIPAL = "runwatch.principal"  # scope key: the logged-in Principal, or None on public reads

router = APIRouter(include_in_schema=False)


@router.get("/login")
def login_page(
    request: Request,
    session: SessionDep,
    token: str | None = None,
    next_page: Annotated[str, Query(alias="next")] = "/",
) -> Response:
    """The login form; with ``?token=`` (a link printed by ``runwatch serve``) log in at once."""
    if token is None:
        return _form(next_page)
    return _log_in(request, session, token, next_page)


@router.post("/login")
def login_submit(
    request: Request,
    session: SessionDep,
    token: Annotated[str, Form(max_length=200)],
    next_page: Annotated[str, Form(alias="next", max_length=2000)] = "/",
) -> Response:
    return _log_in(request, session, token, next_page)


@router.get("/logout")
def logout() -> Response:
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="lax")
    return response


def _log_in(request: Request, session: SessionDep, token: str, next_page: str) -> Response:
    secret = token.strip()
    if authenticate(session=session, secret=secret) is None:
        return _form(next_page, "That token is not valid, or it was revoked.", status=401)
    response = RedirectResponse(_local(next_page), status_code=303)
    response.set_cookie(
        COOKIE,
        secret,
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


def _local(target: str) -> str:
    """Only a path on this server: never an open redirect to another site."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return "/"
    return target


FORM = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Runwatch - log in</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body {{ font-family: system-ui, sans-serif; display: grid; place-items: center; min-height: 90vh; }}
form {{ display: grid; gap: .6rem; width: min(26rem, 90vw); }}
input, button {{ font: inherit; padding: .45rem .6rem; }}
.error {{ color: #b42318; }} .muted {{ color: #667085; font-size: .9rem; }}
</style></head>
<body><form method="post" action="/login">
<h1>Runwatch</h1>
{error}
<label for="token">API token</label>
<input id="token" name="token" type="password" autocomplete="off" required autofocus
 placeholder="rwt_...">
<input type="hidden" name="next" value="{next}">
<button type="submit">Log in</button>
<p class="muted">Create one with <code>runwatch tokens create NAME --scope read</code>; the
embedded default keeps an admin token in <code>.runwatch/admin-token</code>.</p>
</form></body></html>
"""


def _form(next_page: str, error: str | None = None, status: int = 200) -> HTMLResponse:
    shown = f'<p class="error" role="alert">{html.escape(error)}</p>' if error else ""
    body = FORM.format(error=shown, next=html.escape(_local(next_page), quote=True))
    return HTMLResponse(body, status_code=status)


class DashboardGate:
    """Wraps the mounted dashboard: lets a request through only with a valid login."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        allowed, principal = await run_in_threadpool(_visitor, scope["app"], Request(scope))
        if not allowed:
            await _refusal(scope)(scope, receive, send)
            return
        scope[PRINCIPAL] = principal
        await self.app(scope, receive, send)


def _visitor(api: FastAPI, request: Request) -> tuple[bool, Principal | None]:
    """Whether the dashboard may answer, and who is asking (None: public reads)."""
    secret = request.cookies.get(COOKIE)
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        secret = header[7:].strip()
    if secret:
        with app_session(api) as session:
            token = authenticate(session=session, secret=secret)
            if token is not None:
                return True, principal_of(token)
    return app_settings(api).public_reads, None


def _refusal(scope: Scope) -> Response:
    path = route_path(scope)
    page = scope["method"] in ("GET", "HEAD") and not path.startswith(("/_", "/assets/"))
    if page:
        query = scope.get("query_string", b"").decode("latin-1")
        target = path + (f"?{query}" if query else "")
        return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)
    return error_response(401, "log in at /login first (the dashboard needs a token)")

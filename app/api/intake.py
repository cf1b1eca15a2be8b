"""Checks made before a request body is read: its size and, for uploads, the token.

FastAPI reads a request's body (spooling uploads to disk) before any dependency runs, so a route
cannot refuse an oversized or unauthenticated upload before it is stored. This middleware can:
a body over its limit is refused with 413 when ``Content-Length`` announces it, or as soon as the
bytes received pass the limit; an upload without a token that may write is refused with 401 or
403 before any of it is read. The route still checks the token's project (it is in the form).
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, HTTPException
from sqlalchemy.exc import OperationalError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.auth import authorize, presented_secret, principal_for, writer
from app.api.deps import app_settings
from app.api.errors import database_unavailable, error_response
from app.config import MiB

log = logging.getLogger(__name__)

UPLOADS = frozenset({"/api/v1/ingest"})  # limited by RUNWATCH_MAX_UPLOAD_BYTES
MAX_BODY_BYTES = 64 * MiB  # every other request body: JSON batches, forms, Dash callbacks
BODYLESS = frozenset({"GET", "HEAD", "OPTIONS"})


class TooLarge(HTTPException):
    """Raised from ``receive``; FastAPI passes HTTP exceptions from body reading through."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body larger than {limit} bytes")

    def response(self) -> Response:
        return error_response(413, str(self.detail))


class Intake:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in BODYLESS:
            await self.app(scope, receive, send)
            return
        api: FastAPI = scope["app"]
        upload = route_path(scope) in UPLOADS
        limit = app_settings(api).max_upload_bytes if upload else MAX_BODY_BYTES
        if upload:
            refusal = await run_in_threadpool(_refuse_uploader, api, Request(scope))
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            await TooLarge(limit).response()(scope, receive, send)
            return

        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise TooLarge(limit)
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, watched_send)
        except TooLarge as exc:  # the app did not turn it into a response itself
            if started:
                raise
            await exc.response()(scope, receive, send)


def route_path(scope: Scope) -> str:
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def _refuse_uploader(api: FastAPI, request: Request) -> Response | None:
    """None when the request carries a live token with write scope (on some project)."""
    try:
        principal = writer(principal_for(api, presented_secret(request)))
        authorize(principal, "write", principal.project)  # scope only: the form names it
    except HTTPException as exc:
        headers = dict(exc.headers) if exc.headers else None
        return error_response(exc.status_code, str(exc.detail), headers=headers)
    except OperationalError:  # a middleware: the app's exception handlers do not see this
        log.warning("database unavailable: upload refused")
        return database_unavailable()
    return None

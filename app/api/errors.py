"""One error body for every failure: ``{"error": {"status", "code", "message", "details"}}``.

Clients (CI scripts, the CLI, the training-side logger) read ``error.code`` and
``error.message``; FastAPI's ``detail`` is not used.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, DBAPIError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)

CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid",
    429: "too_many_requests",
    500: "internal",
    503: "unavailable",
}


def error_body(status: int, message: str, details: list[Any] | None = None) -> dict[str, Any]:
    return {
        "error": {
            "status": status,
            "code": CODES.get(status, "error"),
            "message": message,
            "details": details or [],
        }
    }


def error_response(
    status: int,
    message: str,
    details: list[Any] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(error_body(status, message, details), status_code=status, headers=headers)


def database_unavailable() -> JSONResponse:
    """503 while the database is away: clients retry (``Retry-After``), nothing was changed."""
    return error_response(503, "database unavailable", headers={"Retry-After": "5"})


def _validation_details(exc: RequestValidationError) -> list[dict[str, Any]]:
    return [
        {"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": e.get("type", "")}
        for e in exc.errors()
    ]


def install(api: FastAPI) -> None:
    @api.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = dict(exc.headers) if exc.headers else None
        return error_response(exc.status_code, str(exc.detail), headers=headers)

    @api.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        details = _validation_details(exc)
        first = details[0] if details else {}
        where = ".".join(str(p) for p in first.get("loc", []))
        message = f"{where}: {first.get('msg')}" if first else "invalid request"
        return error_response(422, message, details)

    @api.exception_handler(OperationalError)
    async def database_down(request: Request, exc: OperationalError) -> JSONResponse:
        log.warning("database unavailable: %s", type(exc.orig).__name__)
        return database_unavailable()

    @api.exception_handler(OverflowError)
    async def number_too_large(request: Request, exc: OverflowError) -> JSONResponse:
        return error_response(422, "a number in the request is out of range")

    @api.exception_handler(DataError)
    async def data_out_of_range(request: Request, exc: DataError) -> JSONResponse:
        return error_response(422, "a value in the request is out of range for the database")

    @api.exception_handler(DBAPIError)
    async def database_error(request: Request, exc: DBAPIError) -> JSONResponse:
        if exc.connection_invalidated:
            return database_unavailable()
        log.exception("database error on %s %s", request.method, request.url.path)
        return error_response(500, "internal error")

    @api.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal error")

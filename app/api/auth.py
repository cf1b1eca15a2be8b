"""Who is calling and what they may do.

A request carries a token as ``Authorization: Bearer <token>`` (the dashboard keeps it in a
cookie after ``/login``; the cookie counts for GET and HEAD only, so a cross-site form cannot
write with it). Writes always need one; reads need one unless the deployment sets
``RUNWATCH_PUBLIC_READS``. A token has a scope (read < write < admin) and reaches one project
or, when created without one, every project. Missing or unknown tokens get 401; a valid token
that does not reach the target gets 403. A live token is remembered for a few seconds
(``app.api.token_cache``): a revoked one is refused by the API within ``TTL_S`` seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Request
from starlette.concurrency import run_in_threadpool

from app.api.deps import SettingsDep, app_session
from app.api.token_cache import TokenCache
from app.models import ApiToken
from app.services.tokens import RANK, authenticate

COOKIE = "runwatch_token"
CHALLENGE = {"WWW-Authenticate": "Bearer"}
COOKIE_METHODS = frozenset({"GET", "HEAD"})  # the dashboard's cookie is for reading


@dataclass(frozen=True)
class Principal:
    token_id: int
    name: str
    scope: str
    project: str | None  # None: every project

    def allows(self, scope: str, project: str | None) -> bool:
        """``project`` None means a resource outside any project (nodes, channels)."""
        if RANK[self.scope] < RANK[scope]:
            return False
        return self.project is None or project == self.project


def presented_secret(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if header:
        kind, _, value = header.partition(" ")
        if kind.lower() == "bearer" and value.strip():
            return value.strip()
        return header.strip()  # malformed: still counts as presented, and fails
    if request.method not in COOKIE_METHODS:
        return None  # a cross-site form could send the cookie: writes need the header
    return request.cookies.get(COOKIE) or None


async def current_principal(request: Request) -> Principal | None:
    """The caller; a token seen within the cache's TTL needs no lookup (nor a thread)."""
    secret = presented_secret(request)
    if secret is None:
        return None
    principal = token_cache(request.app).get(secret)
    if principal is not None:
        return principal
    return await run_in_threadpool(principal_for, request.app, secret)


def principal_for(api: FastAPI, secret: str | None) -> Principal | None:
    """The caller presenting ``secret`` (None: no token); 401 when it is unknown or revoked.

    Blocks on the database when the token is not in the app's cache: call it in a thread."""
    if secret is None:
        return None
    principal = token_cache(api).get(secret)
    if principal is None:
        with app_session(api) as session:
            token = authenticate(session=session, secret=secret)
            if token is None:
                raise HTTPException(401, "invalid or revoked token", headers=CHALLENGE)
            principal = principal_of(token)
        token_cache(api).put(secret, principal)
    return principal


def token_cache(api: FastAPI) -> TokenCache[Principal]:
    """The app's cache of recently seen live tokens (made on first use)."""
    cache: TokenCache[Principal] | None = getattr(api.state, "token_cache", None)
    if cache is None:
        cache = api.state.token_cache = TokenCache()
    return cache


def principal_of(token: ApiToken) -> Principal:
    return Principal(
        token_id=token.id,
        name=token.name,
        scope=token.scope,
        project=token.project.name if token.project is not None else None,
    )


PrincipalDep = Annotated[Principal | None, Depends(current_principal)]


async def require_reader(principal: PrincipalDep, settings: SettingsDep) -> Principal | None:
    if principal is None and not settings.public_reads:
        raise HTTPException(
            401, "a token is required: send 'Authorization: Bearer <token>'", headers=CHALLENGE
        )
    return principal


async def require_token(principal: PrincipalDep) -> Principal:
    return writer(principal)


def writer(principal: Principal | None) -> Principal:
    """``principal``, or 401 when the request carried no token."""
    if principal is None:
        raise HTTPException(
            401, "writes need a token: send 'Authorization: Bearer <token>'", headers=CHALLENGE
        )
    return principal


Reader = Annotated[Principal | None, Depends(require_reader)]
Writer = Annotated[Principal, Depends(require_token)]


def authorize(principal: Principal | None, scope: str, project: str | None) -> None:
    """Raise 403 unless ``principal`` holds ``scope`` on ``project`` (None: global resources).

    ``principal`` None passes only for reads on a deployment with public reads.
    """
    if principal is None:
        if scope == "read":
            return
        raise HTTPException(401, "a token is required", headers=CHALLENGE)
    if principal.allows(scope, project):
        return
    if RANK[principal.scope] < RANK[scope]:
        raise HTTPException(403, f"this token has {principal.scope} scope; {scope} is needed")
    target = f"project {project!r}" if project is not None else "resources outside a project"
    raise HTTPException(403, f"this token does not reach {target}")


def project_filter(principal: Principal | None) -> str | None:
    """The only project a listing may show to this caller (None: all)."""
    return principal.project if principal is not None else None

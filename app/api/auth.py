"""Who is calling and what they may do.

A request carries a token as ``Authorization: Bearer <token>`` (the dashboard keeps it in a
cookie after ``/login``; the cookie counts for GET and HEAD only, so a cross-site form cannot
write with it). Writes always need one; reads need one unless the deployment sets
``RUNWATCH_PUBLIC_READS``. A token has a scope (read < write < admin) and reaches one project
or, when created without one, every project. Missing or unknown tokens get 401; a valid token
that does not reach the target gets 403.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request

from app.api.deps import SessionDep, SettingsDep
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


def current_principal(request: Request, session: SessionDep) -> Principal | None:
    secret = presented_secret(request)
    if secret is None:
        return None
    token = authenticate(session=session, secret=secret)
    if token is None:
        raise HTTPException(401, "invalid or revoked token", headers=CHALLENGE)
    return principal_of(token)


def principal_of(token: ApiToken) -> Principal:
    return Principal(
        token_id=token.id,
        name=token.name,
        scope=token.scope,
        project=token.project.name if token.project is not None else None,
    )


PrincipalDep = Annotated[Principal | None, Depends(current_principal)]


def require_reader(principal: PrincipalDep, settings: SettingsDep) -> Principal | None:
    if principal is None and not settings.public_reads:
        raise HTTPException(
            401, "a token is required: send 'Authorization: Bearer <token>'", headers=CHALLENGE
        )
    return principal


def require_token(principal: PrincipalDep) -> Principal:
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

"""API tokens: created once, shown once, stored as a SHA-256 digest, checked per request."""

from __future__ import annotations

import hashlib
import os
import secrets
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from app.config import Settings
from app.models import ApiToken, Project

SCOPES = ("read", "write", "admin")
RANK = {scope: rank for rank, scope in enumerate(SCOPES, start=1)}
TOKEN_PREFIX = "rwt_"
LAST_USED_RESOLUTION = timedelta(minutes=1)  # do not write on every request


class TokenError(ValueError):
    pass


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(
    *, session: Session, name: str, scope: str, project: str | None
) -> tuple[ApiToken, str]:
    """A new token for ``project`` (every project when None). The secret is returned once."""
    if scope not in RANK:
        raise TokenError(f"scope must be one of {', '.join(SCOPES)}, not {scope!r}")
    if scope == "admin" and project is not None:
        raise TokenError("an admin token reaches every project; drop --project")
    project_id = None
    if project is not None:
        found = session.scalars(select(Project).where(Project.name == project)).one_or_none()
        if found is None:
            found = Project(name=project)
            session.add(found)
            session.flush()
        project_id = found.id
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(
        name=name,
        scope=scope,
        project_id=project_id,
        digest=digest(secret),
        prefix=secret[: len(TOKEN_PREFIX) + 6],
    )
    session.add(token)
    session.flush()
    return token, secret


def authenticate(*, session: Session, secret: str) -> ApiToken | None:
    """The live token with this secret, or None."""
    if not secret.startswith(TOKEN_PREFIX) or len(secret) > 200:
        return None
    token = session.scalars(
        select(ApiToken)
        .where(ApiToken.digest == digest(secret), ApiToken.revoked_at.is_(None))
        .options(selectinload(ApiToken.project))
    ).one_or_none()
    if token is None:
        return None
    now = datetime.now(UTC)
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        token.last_used_at = now
    return token


def list_tokens(*, session: Session) -> list[ApiToken]:
    return list(
        session.scalars(
            select(ApiToken).options(selectinload(ApiToken.project)).order_by(ApiToken.id)
        )
    )


def revoke(*, session: Session, token_id: int) -> ApiToken:
    token = session.get(ApiToken, token_id)
    if token is None:
        raise TokenError(f"no token with id {token_id}")
    if token.revoked_at is None:
        token.revoked_at = datetime.now(UTC)
    return token


def ensure_local_admin_token(*, session: Session, settings: Settings) -> Path:
    """The embedded mode's admin token, written once to a file only this user can read.

    A file whose token was revoked (or belongs to another database) is replaced.
    """
    path = settings.admin_token_path
    if path.is_file():
        secret = path.read_text().strip()
        if authenticate(session=session, secret=secret) is not None:
            return path
    _, secret = create_token(session=session, name="local admin", scope="admin", project=None)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(secret + "\n")
    os.chmod(path, 0o600)
    return path

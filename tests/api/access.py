"""Helpers for the access tests: tokens of every kind, the app on a test database, seeded rows."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from sqlalchemy import Engine, func, select

from app.api.deps import get_session, get_settings
from app.api.main import create_app
from app.config import Settings
from app.db import session_scope
from app.models import Base
from app.services import alerts as alert_service
from app.services import live as live_service
from app.services import nodes as node_service
from app.services.tokens import create_token, revoke


@dataclass(frozen=True)
class Tokens:
    admin: str
    write_all: str  # write, every project
    read_all: str
    write_alpha: str  # write, project alpha only
    read_alpha: str
    write_beta: str
    revoked: str  # was write on every project


def make_tokens(engine: Engine) -> Tokens:
    with session_scope(engine) as session:

        def make(scope: str, project: str | None = None) -> str:
            return create_token(session=session, name=scope, scope=scope, project=project)[1]

        gone, revoked = create_token(session=session, name="gone", scope="write", project=None)
        revoke(session=session, token_id=gone.id)
        return Tokens(
            admin=make("admin"),
            write_all=make("write"),
            read_all=make("read"),
            write_alpha=make("write", "alpha"),
            read_alpha=make("read", "alpha"),
            write_beta=make("write", "beta"),
            revoked=revoked,
        )


def make_api(engine: Engine, settings: Settings, *, dashboard: bool = False) -> FastAPI:
    def session_override() -> Iterator[Any]:
        with session_scope(engine) as session:
            yield session

    api = create_app(mount_dashboard=dashboard)
    api.dependency_overrides[get_session] = session_override
    api.dependency_overrides[get_settings] = lambda: settings
    return api


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@dataclass(frozen=True)
class Seeded:
    run_id: int  # a live run in project alpha
    beta_run_id: int  # a live run in project beta
    node_id: int
    channel_id: int  # an email alert channel (no SMTP server: a test message fails at once)
    rule_id: int  # an alert rule of project alpha
    tag: str  # in every seeded name


def seed(engine: Engine, tag: str) -> Seeded:
    """A run in alpha, one in beta, a node, an alert channel and rule, named after ``tag``."""
    with session_scope(engine) as session:
        alpha, _ = live_service.get_or_create_run(session=session, project="alpha", name=tag)
        beta, _ = live_service.get_or_create_run(session=session, project="beta", name=tag)
        node, _ = node_service.upsert(
            session=session, name=f"node-{tag}", kind="dcgm", url="http://127.0.0.1:9/metrics"
        )
        channel = alert_service.create_channel(
            session=session, name=f"mail-{tag}", kind="email", recipients=["ops@example.com"]
        )
        rule = alert_service.create_rule(session=session, project="alpha", channel=channel)
        session.flush()
        return Seeded(
            run_id=alpha.id,
            beta_run_id=beta.id,
            node_id=node.id,
            channel_id=channel.id,
            rule_id=rule.id,
            tag=tag,
        )


def row_counts(engine: Engine) -> dict[str, int]:
    with session_scope(engine) as session:
        return {
            table.name: int(session.scalar(select(func.count()).select_from(table)) or 0)
            for table in Base.metadata.sorted_tables
        }

"""`runwatch tokens create/list/revoke` on both backends: the secret is printed once and stored
only as its digest; a revoked token no longer authenticates; bad input exits 2."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from app.commands.tokens import announce_local_admin
from app.config import Settings
from app.db import session_scope
from app.models import ApiToken, Base
from app.services.tokens import authenticate, revoke
from tests.procs import runwatch, runwatch_env


def test_create_list_revoke(tmp_path: Path, database_url: str, engine: Engine) -> None:
    env = runwatch_env(home=str(tmp_path / "home"), database_url=database_url)
    created = runwatch("tokens", "create", "ci", "--scope", "write", "--project", "p1", env=env)
    assert created.returncode == 0, created.stderr
    lines = created.stdout.splitlines()
    assert lines[0] == "created token 1 'ci': write scope on project p1"
    secret = lines[1]
    assert secret.startswith("rwt_") and len(secret) > 40
    assert "only time it is shown" in lines[2]

    as_json = runwatch("tokens", "create", "reader", "--scope", "read", "--json", env=env)
    assert as_json.returncode == 0, as_json.stderr
    reader = json.loads(as_json.stdout)
    assert reader["token"].startswith(reader["prefix"])
    assert {k: reader[k] for k in ("id", "name", "scope", "project")} == {
        "id": 2,
        "name": "reader",
        "scope": "read",
        "project": None,
    }

    listed = runwatch("tokens", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(r["id"], r["name"], r["scope"], r["project"]) for r in rows] == [
        (1, "ci", "write", "p1"),
        (2, "reader", "read", None),
    ]
    assert secret not in listed.stdout and reader["token"] not in listed.stdout
    assert all(r["revoked_at"] is None and r["created_at"] for r in rows)
    table = runwatch("tokens", "list", env=env).stdout.splitlines()
    assert table[0].split()[:6] == ["ID", "NAME", "SCOPE", "PROJECT", "PREFIX", "CREATED"]
    assert table[2].split()[:4] == ["2", "reader", "read", "*"]

    _assert_only_digests(engine, [secret, reader["token"]])
    with session_scope(engine) as session:
        assert authenticate(session=session, secret=secret) is not None

    revoked = runwatch("tokens", "revoke", "1", env=env)
    assert revoked.returncode == 0 and revoked.stdout.strip() == "revoked token 1 'ci'"
    with session_scope(engine) as session:
        assert authenticate(session=session, secret=secret) is None
        assert authenticate(session=session, secret=reader["token"]) is not None
    rows = json.loads(runwatch("tokens", "list", "--json", env=env).stdout)
    assert rows[0]["revoked_at"] is not None and rows[1]["revoked_at"] is None


def test_bad_input_exits_2(tmp_path: Path, database_url: str, engine: Engine) -> None:
    env = runwatch_env(home=str(tmp_path / "home"), database_url=database_url)
    cases = {
        ("create", "x", "--scope", "root"): "scope must be one of read, write, admin",
        ("create", "x", "--scope", "admin", "--project", "p"): "admin token reaches every",
        ("create", "", "--scope", "read"): "NAME must be 1 to 200 characters",
        ("create", "x" * 201, "--scope", "read"): "NAME must be 1 to 200 characters",
        ("revoke", "99"): "no token with id 99",
    }
    for args, message in cases.items():
        result = runwatch("tokens", *args, env=env)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert message in result.stderr, (args, result.stderr)
    assert runwatch("tokens", "create", "x", env=env).returncode == 2  # --scope is required
    assert runwatch("tokens", "revoke", "one", env=env).returncode == 2
    with session_scope(engine) as session:
        assert session.scalars(select(ApiToken)).all() == []


def _assert_only_digests(engine: Engine, secrets: list[str]) -> None:
    """No table holds a secret in plain text (nor its unprefixed part); the digests are there."""
    with session_scope(engine) as session:
        dumped = "\n".join(
            repr(tuple(row))
            for table in Base.metadata.sorted_tables
            for row in session.execute(select(table))
        )
        digests = set(session.scalars(select(ApiToken.digest)))
    for secret in secrets:
        assert secret not in dumped and secret[4:] not in dumped
        assert hashlib.sha256(secret.encode()).hexdigest() in digests
    url = engine.url
    if url.get_backend_name() == "sqlite" and url.database:  # the file and its write-ahead log
        for path in Path(url.database).parent.glob(Path(url.database).name + "*"):
            raw = path.read_bytes()
            assert not any(secret[4:].encode() in raw for secret in secrets), path


def test_only_the_embedded_database_gets_a_local_admin_token(
    settings: Settings, engine: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    announce_local_admin(settings, "0.0.0.0", 8765, engine)
    path = settings.admin_token_path
    if engine.dialect.name != "sqlite":  # PostgreSQL: tokens come from `runwatch tokens create`
        assert not path.exists() and capsys.readouterr().out == ""
        return
    secret = path.read_text().strip()
    assert path.stat().st_mode & 0o777 == 0o600
    printed = capsys.readouterr().out
    login = "http://127.0.0.1:8765/login"
    assert printed == f"Admin token in {path} - log in to the dashboard at {login} with it\n"
    assert secret not in printed
    announce_local_admin(settings, "127.0.0.1", 8765, engine)  # kept while it is valid
    assert path.read_text().strip() == secret
    with session_scope(engine) as session:
        token = authenticate(session=session, secret=secret)
        assert token is not None and token.scope == "admin"
        revoke(session=session, token_id=token.id)
    announce_local_admin(settings, "127.0.0.1", 8765, engine)  # revoked: replaced
    assert path.read_text().strip() != secret

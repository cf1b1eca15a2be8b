"""``runwatch tokens``: API tokens, created (and shown) once, listed, revoked.

A token is stored only as its SHA-256 digest: the secret printed by ``create`` cannot be shown
again. ``announce_local_admin`` gives the embedded default (SQLite) its admin token.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from app.config import Settings

if TYPE_CHECKING:
    from sqlalchemy import Engine

tokens_cli = typer.Typer(
    help="API tokens: create (the secret is shown once), list, revoke.", no_args_is_help=True
)

MAX_NAME = 200


def _fail(message: str) -> NoReturn:
    typer.secho(message, err=True, fg=typer.colors.RED)
    raise typer.Exit(2)


def _prepare() -> None:
    from app.cli import _prepare_database
    from app.config import get_settings

    _prepare_database(get_settings())


@tokens_cli.command("create")
def create(
    name: Annotated[str, typer.Argument(help="What the token is for, e.g. ci-nightly")],
    scope: Annotated[str, typer.Option(help="read, write or admin")],
    project: Annotated[
        str | None, typer.Option(help="The one project it reaches (default: every project)")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON (with the secret in 'token')")
    ] = False,
) -> None:
    """Create a token and print its secret, once."""
    from app.db import get_engine, session_scope
    from app.services.tokens import TokenError, create_token

    if not name.strip() or len(name) > MAX_NAME:
        _fail(f"NAME must be 1 to {MAX_NAME} characters")
    if project is not None and (not project.strip() or len(project) > MAX_NAME):
        _fail(f"--project must be 1 to {MAX_NAME} characters")
    _prepare()
    try:
        with session_scope(get_engine()) as session:
            token, secret = create_token(session=session, name=name, scope=scope, project=project)
            row = _row(token)
    except TokenError as exc:
        _fail(str(exc))
    if as_json:
        typer.echo(json.dumps({**row, "token": secret}))
        return
    reach = f"project {project}" if project is not None else "every project"
    typer.echo(f"created token {row['id']} {name!r}: {scope} scope on {reach}")
    typer.echo(secret)
    typer.echo("This is the only time it is shown: Runwatch keeps only a hash of it.")


@tokens_cli.command("list")
def list_(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False,
) -> None:
    """Every token (never its secret): id, name, scope, project, prefix, use, revocation."""
    from app.db import get_engine, session_scope
    from app.services.tokens import list_tokens

    _prepare()
    with session_scope(get_engine()) as session:
        rows = [_row(token) for token in list_tokens(session=session)]
    if as_json:
        typer.echo(json.dumps(rows))
        return
    header = ("ID", "NAME", "SCOPE", "PROJECT", "PREFIX", "CREATED", "LAST USED", "REVOKED")
    table = [header] + [
        (
            str(r["id"]),
            r["name"],
            r["scope"],
            r["project"] or "*",
            r["prefix"] + "...",
            _when(r["created_at"]),
            _when(r["last_used_at"]),
            _when(r["revoked_at"]),
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for line in table:
        cells = (cell.ljust(width) for cell, width in zip(line, widths, strict=True))
        typer.echo("  ".join(cells).rstrip())


@tokens_cli.command("revoke")
def revoke(
    token_id: Annotated[int, typer.Argument(metavar="ID", help="From `tokens list`")],
) -> None:
    """Revoke a token: requests with it get 401 from now on."""
    from app.db import get_engine, session_scope
    from app.services.tokens import TokenError
    from app.services.tokens import revoke as revoke_token

    _prepare()
    try:
        with session_scope(get_engine()) as session:
            token = revoke_token(session=session, token_id=token_id)
            name = token.name
    except TokenError as exc:
        _fail(str(exc))
    typer.echo(f"revoked token {token_id} {name!r}")


def _row(token: Any) -> dict[str, Any]:
    def iso(value: datetime | None) -> str | None:
        return value.isoformat() if value is not None else None

    return {
        "id": token.id,
        "name": token.name,
        "scope": token.scope,
        "project": token.project.name if token.project is not None else None,
        "prefix": token.prefix,
        "created_at": iso(token.created_at),
        "last_used_at": iso(token.last_used_at),
        "revoked_at": iso(token.revoked_at),
    }


def _when(value: str | None) -> str:
    return value[:16].replace("T", " ") if value else "-"


def announce_local_admin(
    settings: Settings, host: str, port: int, engine: Engine | None = None
) -> None:
    """On the embedded database (SQLite), make sure the local admin token exists and print
    where it is and where to log in. The secret itself is never printed (terminal output ends
    up in log files). Other databases get tokens from ``runwatch tokens create``."""
    from app.db import get_engine, session_scope
    from app.services.tokens import ensure_local_admin_token

    engine = engine or get_engine()
    if engine.dialect.name != "sqlite":
        return
    with session_scope(engine) as session:
        path = ensure_local_admin_token(session=session, settings=settings)
    shown = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
    base = (settings.public_url or f"http://{shown}:{port}").rstrip("/")
    typer.echo(f"Admin token in {path} - log in to the dashboard at {base}/login with it")

"""Registering the nodes telemetry is pulled from (one at a time, or many from a file)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models import Node
from app.services.scraping import KINDS

EDITABLE = ("kind", "url", "query", "interval_s", "timeout_s", "enabled", "labels")


class NodeError(ValueError):
    pass


def validate(fields: dict[str, Any]) -> dict[str, Any]:
    kind = fields.get("kind")
    if kind is not None and kind not in KINDS:
        raise NodeError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    url = fields.get("url")
    if url is not None and not str(url).startswith(("http://", "https://")):
        raise NodeError(f"url must be http(s)://..., not {url!r}")
    interval = fields.get("interval_s")
    if interval is not None and not 0.5 <= float(interval) <= 86400:
        raise NodeError("interval_s must be between 0.5 and 86400 seconds")
    timeout = fields.get("timeout_s")
    if timeout is not None and not 0.1 <= float(timeout) <= 120:
        raise NodeError("timeout_s must be between 0.1 and 120 seconds")
    return fields


def upsert(*, session: Session, name: str, **fields: Any) -> tuple[Node, bool]:
    """Create the node ``name`` or update the fields given. Returns (node, created)."""
    fields = validate({k: v for k, v in fields.items() if k in EDITABLE and v is not None})
    node = session.scalars(select(Node).where(Node.name == name)).one_or_none()
    created = node is None
    if node is None:
        if "url" not in fields:
            raise NodeError(f"node {name!r} needs a url")
        node = Node(name=name, kind=fields.pop("kind", "dcgm"), url=fields.pop("url"), labels={})
        session.add(node)
    for key, value in fields.items():
        setattr(node, key, value)
    session.flush()
    return node, created


def load_file(path: Path) -> list[dict[str, Any]]:
    """Nodes from a TOML (``[[node]]`` tables) or JSON (a list, or ``{"nodes": [...]}``) file."""
    text = path.read_text()
    try:
        data: Any = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise NodeError(f"{path}: {exc}") from None
    if isinstance(data, dict):
        data = data.get("node", data.get("nodes", []))
    if not isinstance(data, list) or not all(isinstance(n, dict) for n in data):
        raise NodeError(f"{path}: expected a list of nodes")
    for index, entry in enumerate(data):
        if not isinstance(entry.get("name"), str):
            raise NodeError(f"{path}: node {index + 1} has no name")
    return data

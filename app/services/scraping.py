"""Pulling telemetry from nodes: which are due, and one scrape of one node.

A failed scrape stores nothing (the gap stays a gap) and is recorded on the node: its last
error, when it happened, and how many scrapes in a row failed.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from urllib.parse import urlsplit

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models import Node
from app.services.telemetry_store import store_scrape
from app.telemetry.dcgm import parse_dcgm
from app.telemetry.prometheus_api import parse_query_range, query_range_url
from app.telemetry.samples import GpuSample, Scrape, TelemetryError

KINDS = ("dcgm", "prometheus", "agent")
DCGM_SELECTOR = '__name__=~"DCGM_FI_.*"'


def due_nodes(session: Session, now: datetime) -> list[Node]:
    """Enabled nodes whose interval has passed since their last attempt; marks them attempted."""
    nodes = session.scalars(select(Node).where(Node.enabled.is_(True))).all()
    due = []
    for node in nodes:
        last = node.last_attempt_at
        if last is None or (now - last).total_seconds() >= node.interval_s * 0.95:
            node.last_attempt_at = now
            due.append(node)
    return due


def scrape_node(session: Session, node_id: int, *, client: httpx.Client | None = None) -> int:
    """Scrape one node now and store what it answered. Returns the number of values stored;
    raises nothing for a node that is down (the failure is recorded on the node)."""
    node = session.get(Node, node_id)
    if node is None:
        return 0
    started = time.time()
    own = client is None
    http = client or httpx.Client(timeout=node.timeout_s)
    try:
        scrape = _fetch(http, node, started)
        stored = store_scrape(session, node, scrape, at=started)
    except (httpx.HTTPError, TelemetryError) as exc:
        node.last_error = f"{type(exc).__name__}: {exc}"[:2000]
        node.last_error_at = datetime.now(UTC)
        node.failures = (node.failures or 0) + 1
        return 0
    finally:
        if own:
            http.close()
    node.last_success_at = datetime.fromtimestamp(started, UTC)
    node.failures = 0
    if scrape.warnings:
        node.last_error = "; ".join(scrape.warnings)[:2000]
    elif node.failures == 0:
        node.last_error = None
    return stored


def _fetch(http: httpx.Client, node: Node, now: float) -> Scrape:
    if node.kind in ("dcgm", "agent"):
        response = http.get(node.url, timeout=node.timeout_s)
        response.raise_for_status()
        return parse_dcgm(response.text, host=_host_of(node))
    if node.kind == "prometheus":
        since = node.last_success_at.timestamp() if node.last_success_at else now - node.interval_s
        start = max(since, now - 3600.0)  # at most an hour of catch-up per scrape
        samples: list[GpuSample] = []
        warnings: list[str] = []
        for url in query_range_url(node.url, _promql(node), start, now, node.interval_s):
            response = http.get(url, timeout=node.timeout_s)
            response.raise_for_status()
            part = parse_query_range(response.text)  # not JSON: a TelemetryError, not a crash
            samples.extend(s for s in part.samples if s.timestamp is None or s.timestamp > since)
            warnings.extend(part.warnings)
        return Scrape(samples=samples, warnings=warnings, source="prometheus")
    raise TelemetryError(f"node {node.name}: unknown kind {node.kind!r}")


def _promql(node: Node) -> str:
    matcher = (node.query or "").strip()
    if matcher.startswith("{") and matcher.endswith("}"):
        inner = matcher[1:-1].strip()
        return "{" + DCGM_SELECTOR + ("," + inner if inner else "") + "}"
    return matcher or "{" + DCGM_SELECTOR + "}"


def _host_of(node: Node) -> str:
    host = node.labels.get("host") if node.labels else None
    return str(host or urlsplit(node.url).hostname or node.name)

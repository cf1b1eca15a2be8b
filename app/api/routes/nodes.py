"""Nodes and their telemetry."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, HTTPException, Query, Response
from pydantic import BaseModel, Field
from sqlalchemy import select

from app.api.auth import Reader, Writer, authorize
from app.api.deps import SessionDep
from app.models import Node, TelemetrySeries
from app.services import nodes as node_service
from app.services.telemetry_store import series_payload

# Nodes belong to no project: any reader sees them; only a token reaching every project writes.
router = APIRouter(prefix="/api/v1/nodes", tags=["telemetry"])


class NodeIn(BaseModel):
    name: Annotated[str, Field(min_length=1, max_length=200)]
    kind: str = "dcgm"
    url: str
    query: str | None = None
    interval_s: float = 5.0
    timeout_s: float = 4.0
    enabled: bool = True
    labels: dict[str, Any] = Field(default_factory=dict)


class NodePatch(BaseModel):
    kind: str | None = None
    url: str | None = None
    query: str | None = None
    interval_s: float | None = None
    timeout_s: float | None = None
    enabled: bool | None = None
    labels: dict[str, Any] | None = None


class NodeOut(BaseModel):
    id: int
    name: str
    kind: str
    url: str
    query: str | None
    interval_s: float
    timeout_s: float
    enabled: bool
    labels: dict[str, Any]
    last_success_at: datetime | None
    last_error: str | None
    last_error_at: datetime | None
    failures: int
    series: int


def node_out(session: SessionDep, node: Node) -> NodeOut:
    count = len(
        session.scalars(select(TelemetrySeries.id).where(TelemetrySeries.node_id == node.id)).all()
    )
    return NodeOut(
        id=node.id,
        name=node.name,
        kind=node.kind,
        url=node.url,
        query=node.query,
        interval_s=node.interval_s,
        timeout_s=node.timeout_s,
        enabled=node.enabled,
        labels=node.labels or {},
        last_success_at=node.last_success_at,
        last_error=node.last_error,
        last_error_at=node.last_error_at,
        failures=node.failures or 0,
        series=count,
    )


def _node(session: SessionDep, node_id: int) -> Node:
    node = session.get(Node, node_id)
    if node is None:
        raise HTTPException(404, f"node {node_id} not found")
    return node


@router.get("", response_model=list[NodeOut])
def list_nodes(session: SessionDep, _: Reader) -> list[NodeOut]:
    return [node_out(session, n) for n in session.scalars(select(Node).order_by(Node.name))]


@router.post("", response_model=NodeOut, status_code=201)
def create_node(body: NodeIn, session: SessionDep, principal: Writer) -> NodeOut:
    authorize(principal, "write", None)
    if session.scalars(select(Node.id).where(Node.name == body.name)).first() is not None:
        raise HTTPException(409, f"a node named {body.name!r} exists")
    try:
        node, _ = node_service.upsert(session=session, **body.model_dump())
    except node_service.NodeError as exc:
        raise HTTPException(422, str(exc)) from None
    session.commit()
    return node_out(session, node)


@router.get("/{node_id}", response_model=NodeOut)
def get_node(node_id: int, session: SessionDep, _: Reader) -> NodeOut:
    return node_out(session, _node(session, node_id))


@router.patch("/{node_id}", response_model=NodeOut)
def update_node(node_id: int, body: NodePatch, session: SessionDep, principal: Writer) -> NodeOut:
    authorize(principal, "write", None)
    node = _node(session, node_id)
    try:
        node_service.upsert(session=session, name=node.name, **body.model_dump())
    except node_service.NodeError as exc:
        raise HTTPException(422, str(exc)) from None
    session.commit()
    return node_out(session, node)


@router.delete("/{node_id}", status_code=204)
def delete_node(node_id: int, session: SessionDep, principal: Writer) -> Response:
    authorize(principal, "write", None)
    session.delete(_node(session, node_id))
    session.commit()
    return Response(status_code=204)


@router.get("/{node_id}/telemetry")
def node_telemetry(
    node_id: int,
    session: SessionDep,
    _: Reader,
    metric: Annotated[str, Query(description="Canonical metric, e.g. power, gpu_util")],
    start: Annotated[float | None, Query(alias="from", description="Unix seconds")] = None,
    end: Annotated[float | None, Query(alias="to", description="Unix seconds")] = None,
    max_points: Annotated[int, Query(ge=0, le=100_000)] = 2000,
) -> Response:
    """Each GPU's series of ``metric`` (default: the last hour), downsampled keeping extremes.
    Gaps (failed scrapes) have no points; missing readings are null, never 0."""
    node = _node(session, node_id)
    now = time.time()
    start = now - 3600 if start is None else start
    end = now if end is None else end
    series = session.scalars(
        select(TelemetrySeries)
        .where(TelemetrySeries.node_id == node.id, TelemetrySeries.metric == metric)
        .order_by(TelemetrySeries.host, TelemetrySeries.gpu_index, TelemetrySeries.gpu)
    ).all()
    body = {
        "node_id": node.id,
        "metric": metric,
        "from": start,
        "to": end,
        "series": [series_payload(session, s, start, end, max_points) for s in series],
    }
    return Response(
        orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), media_type="application/json"
    )

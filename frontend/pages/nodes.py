"""Nodes: where GPU telemetry comes from, whether each answers, and its GPUs over time."""

from __future__ import annotations

import time
from typing import Any

import dash
from dash import Input, Output, callback, dcc, html
from sqlalchemy import select

from app.models import Node, TelemetrySeries
from app.services.telemetry_store import series_payload
from frontend import figures
from frontend.components import table
from frontend.data import reading

dash.register_page(__name__, path="/nodes", title="Runwatch - nodes", name="Nodes")

METRICS = ["power", "gpu_util", "sm_active", "temp", "fb_used", "sm_clock"]


def layout(**_: Any) -> html.Div:
    with reading() as session:
        nodes = list(session.scalars(select(Node).order_by(Node.name)))
        rows = [
            [
                n.name,
                n.kind,
                n.url,
                f"{n.interval_s:g} s",
                n.last_success_at.strftime("%Y-%m-%d %H:%M:%S") if n.last_success_at else "never",
                "ok" if not n.failures else f"failing ({n.failures}): {n.last_error}",
            ]
            for n in nodes
        ]
        options: list[dict[str, Any]] = [{"label": n.name, "value": n.id} for n in nodes]
    if not rows:
        body: Any = html.P(
            "No nodes yet: `runwatch nodes add NAME URL` or POST /api/v1/nodes.", className="muted"
        )
    else:
        body = table(["Node", "Kind", "URL", "Every", "Last answer", "State"], rows)
    return html.Div(
        [
            html.H1("Nodes"),
            body,
            html.Div(
                [
                    dcc.Dropdown(
                        id="nodes-node",
                        options=options,
                        value=options[0]["value"] if options else None,
                    ),
                    dcc.Dropdown(
                        id="nodes-metric", options=METRICS, value="power", clearable=False
                    ),
                    dcc.Dropdown(
                        id="nodes-window",
                        clearable=False,
                        value=3600,
                        options=[
                            {"label": "last hour", "value": 3600},
                            {"label": "last day", "value": 86400},
                            {"label": "last week", "value": 604800},
                        ],
                    ),
                ],
                className="filters",
            ),
            dcc.Graph(id="nodes-figure", config={"displaylogo": False}, style={"height": "420px"}),
        ]
    )


@callback(
    Output("nodes-figure", "figure"),
    Input("nodes-node", "value"),
    Input("nodes-metric", "value"),
    Input("nodes-window", "value"),
)
def node_telemetry(node_id: int | None, metric: str, window: int) -> Any:
    if node_id is None:
        return figures.empty_figure("No node selected.")
    now = time.time()
    with reading() as session:
        series = session.scalars(
            select(TelemetrySeries)
            .where(TelemetrySeries.node_id == node_id, TelemetrySeries.metric == metric)
            .order_by(TelemetrySeries.gpu_index, TelemetrySeries.gpu)
        ).all()
        items = [series_payload(session, s, now - window, now, 2000) for s in series]
    for item in items:
        item["times"] = [float(t) for t in item["times"]]
    return figures.node_figure({"metric": metric, "series": items})

"""Compare: two or more runs on one step axis (e.g. a resumed run against a clean one)."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, callback, dcc, html
from sqlalchemy import select

from app.models import Project, Run
from app.services.dashboard import run_view
from frontend import figures
from frontend.data import reading, visible, visible_project

dash.register_page(__name__, path="/compare", title="Runwatch - compare", name="Compare")

MAX_OPTIONS = 2000


def layout(runs: str | None = None, **_: Any) -> html.Div:
    query = select(Run.id, Run.name, Project.name).join(Project, Run.project_id == Project.id)
    scoped = visible_project()
    if scoped is not None:
        query = query.where(Project.name == scoped)
    with reading() as session:
        rows = session.execute(query.order_by(Run.updated_at.desc()).limit(MAX_OPTIONS)).all()
    options = [{"label": f"{project}/{name}", "value": run_id} for run_id, name, project in rows]
    chosen = [int(x) for x in (runs or "").split(",") if x.isdigit()]
    return html.Div(
        [
            html.H1("Compare runs"),
            html.Div(
                [
                    dcc.Dropdown(
                        id="compare-runs",
                        options=options,
                        value=chosen,
                        multi=True,
                        placeholder="Pick two or more runs",
                        style={"minWidth": "30rem"},
                    ),
                    dcc.Dropdown(
                        id="compare-metric",
                        options=["loss", "lr", "grad_norm"],
                        value="loss",
                        clearable=False,
                    ),
                ],
                className="filters",
            ),
            dcc.Graph(
                id="compare-figure", config={"displaylogo": False}, style={"height": "520px"}
            ),
        ]
    )


@callback(
    Output("compare-figure", "figure"),
    Input("compare-runs", "value"),
    Input("compare-metric", "value"),
)
def compare(run_ids: list[int] | None, metric: str) -> Any:
    if not run_ids:
        return figures.empty_figure("Pick runs to compare.")
    with reading() as session:
        views = [
            v
            for v in (
                visible(
                    run_view(session=session, run_id=i, metrics=[metric], telemetry_metric=None)
                )
                for i in run_ids
            )
            if v is not None
        ]
    return figures.compare_figure(views, metric)

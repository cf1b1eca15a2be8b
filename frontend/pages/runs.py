"""Runs: a filterable, sortable, paginated table of every run, newest first."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, callback, ctx, dcc, html

from app.services import runs as run_service
from frontend.components import fmt_step, table, verdict_badge
from frontend.data import reading, visible_project

dash.register_page(__name__, path="/", title="Runwatch - runs", name="Runs")

PAGE_SIZE = 50
SORTS = [
    {"label": "Last update", "value": "updated"},
    {"label": "Name", "value": "name"},
    {"label": "Most steps", "value": "steps"},
    {"label": "Verdict", "value": "verdict"},
]


def layout(**_: Any) -> html.Div:
    scoped = visible_project()
    with reading() as session:
        projects = [scoped] if scoped else run_service.projects(session=session)
    return html.Div(
        [
            html.H1("Runs"),
            html.Div(
                [
                    dcc.Input(
                        id="runs-search",
                        type="search",
                        placeholder="Search run names",
                        debounce=True,
                    ),
                    dcc.Dropdown(id="runs-project", options=projects, placeholder="All projects"),
                    dcc.Dropdown(
                        id="runs-verdict",
                        options=["pass", "warn", "fail"],
                        placeholder="Any verdict",
                    ),
                    dcc.Dropdown(
                        id="runs-status",
                        placeholder="Any status",
                        options=["running", "finished", "crashed", "unknown"],
                    ),
                    dcc.Dropdown(id="runs-sort", options=SORTS, value="updated", clearable=False),
                ],
                className="filters",
            ),
            html.Div(id="runs-table"),
            html.Div(
                [
                    html.Button("Previous", id="runs-prev", n_clicks=0),
                    html.Span(id="runs-range", className="muted"),
                    html.Button("Next", id="runs-next", n_clicks=0),
                ],
                className="pager",
            ),
            dcc.Store(id="runs-offset", data=0),
        ]
    )


@callback(
    Output("runs-offset", "data"),
    Input("runs-prev", "n_clicks"),
    Input("runs-next", "n_clicks"),
    Input("runs-search", "value"),
    Input("runs-project", "value"),
    Input("runs-verdict", "value"),
    Input("runs-status", "value"),
    Input("runs-sort", "value"),
    State("runs-offset", "data"),
    prevent_initial_call=True,
)
def page(_prev: int, _next: int, *rest: Any) -> int:
    offset = int(rest[-1] or 0)
    if ctx.triggered_id == "runs-next":
        return offset + PAGE_SIZE
    if ctx.triggered_id == "runs-prev":
        return max(offset - PAGE_SIZE, 0)
    return 0  # a filter changed: back to the first page


@callback(
    Output("runs-table", "children"),
    Output("runs-range", "children"),
    Output("runs-prev", "disabled"),
    Output("runs-next", "disabled"),
    Input("runs-offset", "data"),
    Input("runs-search", "value"),
    Input("runs-project", "value"),
    Input("runs-verdict", "value"),
    Input("runs-status", "value"),
    Input("runs-sort", "value"),
)
def runs_table(
    offset: int,
    search: str | None,
    project: str | None,
    verdict: str | None,
    status: str | None,
    sort: str | None,
) -> tuple[Any, str, bool, bool]:
    filters = run_service.RunFilter(
        project=visible_project() or project,
        status=status,
        search=search or None,
        limit=PAGE_SIZE,
        offset=offset or 0,
        verdict=verdict,
        order=sort or "updated",
    )
    with reading() as session:
        rows, total = run_service.list_runs(session=session, filters=filters)
        body = [
            [
                name,
                dcc.Link(run.name, href=f"/runs/{run.id}", className="run-link"),
                run.status,
                verdict_badge(run.verdict),
                fmt_step(run.num_steps),
                str(max(run.num_segments - 1, 0)),
                run.updated_at.strftime("%Y-%m-%d %H:%M") if run.updated_at else "",
            ]
            for run, name in rows
        ]
    header = ["Project", "Run", "Status", "Verdict", "Steps", "Resumes", "Updated"]
    content: Any = table(header, body) if body else html.P("No runs match.", className="muted")
    first = (offset or 0) + 1 if total else 0
    last = min((offset or 0) + PAGE_SIZE, total)
    shown = f"{first:,}-{last:,} of {total:,}"
    return content, shown, (offset or 0) == 0, last >= total

"""One run: the loss with the sample-coverage heatmap behind it, checkpoints, resumes and
findings on one step axis; the findings list (click one to zoom to it), segments, checkpoints
with their state components, per-epoch coverage, the LR curve and GPU telemetry."""

from __future__ import annotations

from typing import Any

import dash
from dash import ALL, Input, Output, Patch, State, callback, ctx, dcc, html

from app.services.dashboard import RunView, run_view
from frontend import figures
from frontend.components import (
    CHECK,
    CROSS,
    fmt_step,
    severity_badge,
    stat,
    table,
    verdict_badge,
)
from frontend.data import reading, visible

dash.register_page(__name__, path_template="/runs/<run_id>", title="Runwatch - run")

ZOOM_MARGIN = 0.15  # of the finding's range, each side


def layout(run_id: str | None = None, **_: Any) -> html.Div:
    if run_id is None or not run_id.isdigit():
        return html.Div([html.H1("No such run"), dcc.Link("All runs", href="/")])
    with reading() as session:
        view = visible(run_view(session=session, run_id=int(run_id), telemetry_metric=None))
    if view is None:
        return html.Div([html.H1(f"Run {run_id} not found"), dcc.Link("All runs", href="/")])
    run = view.run
    metric_options = [k for k in view.metric_keys if not k.startswith("eval/")] + [
        k for k in view.metric_keys if k.startswith("eval/")
    ]
    return html.Div(
        [
            html.H1([html.Span(run["name"], id="run-name"), " ", verdict_badge(run["verdict"])]),
            html.Div(
                [
                    stat("Project", run["project"]),
                    stat("Status", run["status"]),
                    stat("Steps", fmt_step(run["num_steps"])),
                    stat("Resumes", str(max(run["num_segments"] - 1, 0))),
                    stat("Dataset", fmt_step(run["dataset_size"]) or "unknown"),
                    stat("Findings", str(sum(f["severity"] != "info" for f in view.findings))),
                ],
                className="stats",
            ),
            html.Div(
                [
                    dcc.Dropdown(
                        id="run-metrics",
                        options=metric_options,
                        value=[k for k in ("loss",) if k in view.metric_keys] or metric_options[:1],
                        multi=True,
                        clearable=False,
                    ),
                    dcc.Checklist(
                        id="run-coverage",
                        options=[{"label": " sample coverage", "value": "on"}],
                        value=["on"] if view.coverage else [],
                    ),
                ],
                className="filters",
            ),
            dcc.Store(id="run-id", data=run["id"]),
            dcc.Store(id="run-finding-ranges", data=_ranges(view)),
            dcc.Graph(
                id="run-figure",
                figure=figures.run_figure(view, ["loss"] if "loss" in view.series else []),
                config={"displaylogo": False},
                style={"height": "560px"},
            ),
            html.H2("Findings"),
            _findings(view),
            html.Div(id="run-details", children=html.P("Loading...", className="muted")),
        ]
    )


@callback(Output("run-details", "children"), Input("run-id", "data"))
def details(run_id: int) -> Any:
    """The panels below the findings, drawn after the main figure so it shows first."""
    with reading() as session:
        view = visible(run_view(session=session, run_id=run_id, metrics=["loss"]))
    if view is None:
        return html.P("This run is gone.", className="muted")
    return [
        html.Div(
            [
                html.Div([html.H2("Per-epoch coverage"), _graph(figures.coverage_bars(view))]),
                html.Div([html.H2("Learning rate"), _graph(figures.lr_figure(view))]),
            ],
            className="columns",
        ),
        html.H2("GPU telemetry"),
        _graph(figures.telemetry_figure(view), "run-telemetry"),
        html.H2("Segments"),
        _segments(view),
        html.H2("Checkpoints"),
        _checkpoints(view),
    ]


def _graph(figure: Any, graph_id: str = "") -> dcc.Graph:
    style = {"height": "320px"}
    if graph_id:
        return dcc.Graph(id=graph_id, figure=figure, config={"displaylogo": False}, style=style)
    return dcc.Graph(figure=figure, config={"displaylogo": False}, style=style)


def _ranges(view: RunView) -> list[list[float] | None]:
    out: list[list[float] | None] = []
    for finding in view.findings:
        step = finding["step"]
        if step is None:
            out.append(None)
            continue
        end = finding["step_end"] if finding["step_end"] is not None else step
        width = max(end - step, 20)
        out.append([step - ZOOM_MARGIN * width - 1, end + ZOOM_MARGIN * width + 1])
    return out


def _findings(view: RunView) -> html.Div | html.P:
    if not view.findings:
        return html.P("Nothing found.", className="muted")
    items = []
    for index, finding in enumerate(view.findings):
        where = f" at step {finding['step']:,}" if finding["step"] is not None else ""
        items.append(
            html.Button(
                [
                    severity_badge(finding["severity"]),
                    " ",
                    html.Strong(finding["kind"]),
                    where,
                    ": ",
                    finding["message"],
                    _repair(finding),
                ],
                id={"type": "run-finding", "index": index},
                className=f"finding finding-{finding['kind']}",
                n_clicks=0,
            )
        )
    return html.Div(items, id="run-findings")


def _repair(finding: dict[str, Any]) -> Any:
    repair = (finding.get("evidence") or {}).get("repair")
    if not repair or not repair.get("advice"):
        return ""
    return html.Div(f"Repair: {repair['advice']}", className="muted")


def _segments(view: RunView) -> html.Table:
    rows = [
        [
            str(s["ordinal"]),
            fmt_step(s["start_step"]),
            fmt_step(s["end_step"]),
            s["resumed_from"] or "",
            _restored(s),
            s["exit_reason"] or "",
            fmt_step(s["metric_rows"]),
        ]
        for s in view.segments
    ]
    header = ["#", "Start step", "End step", "Resumed from", "Restored", "Exit", "Rows"]
    return table(header, rows)


def _restored(segment: dict[str, Any]) -> str:
    if segment["restored"] is not None:
        return ", ".join(segment["restored"])
    return "fresh start" if segment["ordinal"] == 0 and not segment["resumed_from"] else "unknown"


def _checkpoints(view: RunView) -> html.Table | html.P:
    if not view.checkpoints:
        return html.P("No checkpoint manifests.", className="muted")
    names = list(view.checkpoints[0]["components"])
    rows = []
    for ckpt in view.checkpoints:
        marks = [
            html.Span(CHECK if held else CROSS, className="present" if held else "missing")
            for held in (ckpt["components"].get(n, False) for n in names)
        ]
        seconds = ckpt["save_seconds"]
        rows.append(
            [
                ckpt["name"],
                fmt_step(ckpt["step"]),
                *marks,
                "" if seconds is None else f"{seconds:.2f} s",
                ckpt["verdict"] or "",
                "; ".join(ckpt["reasons"]),
            ]
        )
    return table(["Checkpoint", "Step", *names, "Save", "Verdict", "Why"], rows)


@callback(
    Output("run-figure", "figure"),
    Input("run-metrics", "value"),
    Input("run-coverage", "value"),
    State("run-id", "data"),
    prevent_initial_call=True,
)
def redraw(metrics: list[str] | None, coverage: list[str] | None, run_id: int) -> Any:
    chosen = list(metrics or [])
    with reading() as session:
        view = visible(
            run_view(session=session, run_id=run_id, metrics=chosen, telemetry_metric=None)
        )
    if view is None:
        return figures.empty_figure("This run is gone.")
    return figures.run_figure(view, chosen, show_coverage=bool(coverage))


@callback(
    Output("run-figure", "figure", allow_duplicate=True),
    Input({"type": "run-finding", "index": ALL}, "n_clicks"),
    State("run-finding-ranges", "data"),
    prevent_initial_call=True,
)
def zoom_to_finding(clicks: list[int], ranges: list[list[float] | None]) -> Any:
    trigger = ctx.triggered_id
    if not isinstance(trigger, dict) or not any(clicks):
        return dash.no_update
    span = ranges[trigger["index"]]
    if span is None:
        return dash.no_update
    patch = Patch()
    patch["layout"]["xaxis"]["range"] = span
    patch["layout"]["xaxis"]["autorange"] = False
    return patch

"""Several runs' metric on one step axis, each with its resumes marked on its own line."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from app.services.dashboard import RunView
from frontend.figures import style
from frontend.figures.style import empty_figure, text


def compare_figure(views: list[RunView], metric: str) -> go.Figure:
    """``metric`` of each run as a line (legend: the run's name), resumes as small markers."""
    traces: list[go.Scatter] = []
    names = _names([v.run for v in views])
    for i, view in enumerate(views):
        series = view.series.get(metric) or {}
        steps, values = series.get("steps") or [], series.get("values") or []
        if not steps:
            continue
        colour, group = style.colour(i), f"run-{view.run.get('id', i)}"
        traces.append(
            go.Scatter(
                name=names[i],
                x=steps,
                y=values,
                mode="lines",
                line={"color": colour, "width": 1.5},
                connectgaps=False,
                legendgroup=group,
                hovertemplate="step %{x}<br>%{y:.4g}",
            )
        )
        marks = [
            (float(seg["start_step"]), style.value_near(steps, values, float(seg["start_step"])))
            for seg, _ in style.replayed_ranges(view.segments)
        ]
        marks = [(x, y) for x, y in marks if y is not None]
        if marks:
            traces.append(
                go.Scatter(
                    name=f"{names[i]} resumes",
                    x=[m[0] for m in marks],
                    y=[m[1] for m in marks],
                    mode="markers",
                    marker={
                        "color": colour,
                        "symbol": "diamond",
                        "size": 8,
                        "line": {"width": 1, "color": "white"},
                    },
                    legendgroup=group,
                    showlegend=False,
                    hovertext=[f"{names[i]}<br>resume from {x:g}" for x, _ in marks],
                    hoverinfo="text",
                )
            )
    if not traces:
        return empty_figure(f"None of the selected runs logged {metric}")
    layout = style.base_layout(
        f"compare-{metric}",
        xaxis={"title": {"text": "step"}},
        yaxis={"title": {"text": style.axis_title(metric)}},
    )
    layout["legend"]["traceorder"] = "normal"  # one row; groups still toggle together
    return go.Figure(data=traces, layout=layout)


def _names(runs: list[dict[str, Any]]) -> list[str]:
    """Escaped run names; a repeated name gets its run id appended."""
    raw = [str(r.get("name") or f"run {r.get('id', '')}") for r in runs]
    return [
        text(f"{name} #{run.get('id')}" if raw.count(name) > 1 else name)
        for name, run in zip(raw, runs, strict=True)
    ]

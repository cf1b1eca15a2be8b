"""The run page's side panels (coverage per epoch, learning rate, GPU telemetry) and the node
page's telemetry figure."""

from __future__ import annotations

import bisect
import itertools
from datetime import UTC, datetime
from statistics import median
from typing import Any

import plotly.graph_objects as go

from app.services.dashboard import RunView
from frontend.figures import style
from frontend.figures.style import empty_figure, finite, text

GAP_FACTOR = 3.0


def coverage_bars(view: RunView) -> go.Figure:
    """Unseen and repeated samples per designed epoch; resumes drawn inside their epoch."""
    coverage = view.coverage or {}
    epochs = [e for e in coverage.get("epochs") or [] if finite(_get(e, "epoch")) is not None]
    if not epochs:
        return empty_figure("No coverage analysis for this run yet")
    size = finite(view.run.get("dataset_size"))
    x = [e["epoch"] for e in epochs]
    traces = [
        go.Bar(
            name=label,
            x=x,
            y=[finite(e.get(key)) or 0 for e in epochs],
            marker={"color": colour, "opacity": [1.0 if _complete(e) else 0.5 for e in epochs]},
            hovertext=[_bar_text(e, key, size) for e in epochs],
            hoverinfo="text",
        )
        for key, label, colour in (
            ("unseen", "unseen", style.UNSEEN_COLOUR),
            ("repeated", "repeated", style.REPEATED_COLOUR),
        )
    ]
    shapes: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    for epoch, where, starts in _resumes_by_epoch(view.segments, epochs):
        shapes.append(style.vline(where, style.RESUME_COLOUR, "dash", 1.5, name="resume"))
        annotations.append(
            {
                "text": "resume from " + ", ".join(f"{s:g}" for s in starts),
                "hovertext": f"epoch {text(epoch)}: resumed from step "
                + ", ".join(f"{s:g}" for s in starts),
                "x": where,
                "y": 1,
                "xref": "x",
                "yref": "paper",
                "xanchor": "left",
                "yanchor": "top",
                "showarrow": False,
                "font": {"size": 10, "color": style.RESUME_COLOUR},
            }
        )
    layout = style.base_layout(
        f"coverage-{view.run.get('id')}",
        barmode="group",
        xaxis={"title": {"text": "designed epoch"}, "tickmode": "linear", "dtick": 1},
        yaxis={"title": {"text": "samples"}, "rangemode": "tozero"},
        shapes=shapes,
        annotations=annotations,
    )
    return go.Figure(data=traces, layout=layout)


def _get(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else None


def _complete(epoch: dict[str, Any]) -> bool:
    return bool(epoch.get("complete", True))


def _bar_text(epoch: dict[str, Any], key: str, size: float | None) -> str:
    count = finite(epoch.get(key)) or 0
    what = "never seen" if key == "unseen" else "seen more than once"
    share = f" ({count / size:.1%} of the dataset)" if size else ""
    note = "" if _complete(epoch) else "<br>epoch in progress"
    return f"epoch {text(epoch['epoch'])}: {count:,.0f} samples {what}{share}{note}"


def _resumes_by_epoch(
    segments: list[dict[str, Any]], epochs: list[dict[str, Any]]
) -> list[tuple[Any, float, list[float]]]:
    """(epoch, x inside the epoch's slot, resume steps) for each epoch holding a resume."""
    found: dict[int, list[float]] = {}
    for seg, _ in style.replayed_ranges(segments):
        start = float(seg["start_step"])
        for i, epoch in enumerate(epochs):
            first, last = finite(epoch.get("first_step")), finite(epoch.get("last_step"))
            if first is not None and last is not None and first <= start <= last:
                found.setdefault(i, []).append(start)
                break
    out = []
    for i, starts in sorted(found.items()):
        epoch = epochs[i]
        first, last = float(epoch["first_step"]), float(epoch["last_step"])
        frac = (starts[0] - first) / max(last - first, 1.0)
        out.append((epoch["epoch"], float(epoch["epoch"]) - 0.45 + 0.9 * frac, starts))
    return out


def lr_figure(view: RunView) -> go.Figure:
    """Learning rate vs step; the first LR after each resume marked, replayed LR faint."""
    lr = view.series.get("lr") or {}
    steps, values = lr.get("steps") or [], lr.get("values") or []
    if not steps:
        return empty_figure("No learning-rate series logged for this run")
    traces: list[go.BaseTraceType] = [
        go.Scatter(
            name="lr",
            x=steps,
            y=values,
            mode="lines",
            line={"color": style.colour(0), "width": 1.6},
            connectgaps=False,
            hovertemplate="step %{x}<br>lr %{y:.3e}<extra></extra>",
        )
    ]
    replayed = view.replayed.get("lr") or {}
    if replayed.get("steps"):
        traces.append(
            go.Scatter(
                name="replayed lr",
                x=replayed["steps"],
                y=replayed.get("values") or [],
                mode="markers",
                marker={"color": style.REPLAYED_COLOUR, "size": 4},
                hovertemplate="replayed: step %{x}<br>lr %{y:.3e}<extra></extra>",
            )
        )
    found = (_first_after(lr, seg) for seg, _ in style.replayed_ranges(view.segments))
    marks = [m for m in found if m is not None]
    if marks:
        traces.append(
            go.Scatter(
                name="resumes",
                x=[m[0] for m in marks],
                y=[m[1] for m in marks],
                mode="markers",
                marker={"color": style.RESUME_COLOUR, "symbol": "diamond", "size": 10},
                hovertext=[m[2] for m in marks],
                hoverinfo="text",
            )
        )
    layout = style.base_layout(
        f"lr-{view.run.get('id')}",
        xaxis={"title": {"text": "step"}},
        yaxis={"title": {"text": "learning rate"}, "exponentformat": "e"},
    )
    return go.Figure(data=traces, layout=layout)


def _first_after(
    series: dict[str, list[Any]], seg: dict[str, Any]
) -> tuple[float, float, str] | None:
    """(step, lr, hover) of the resumed process's first logged LR."""
    steps, values = series.get("steps") or [], series.get("values") or []
    owners = series.get("segments") or []
    start = float(seg["start_step"])
    if len(owners) == len(steps) and seg.get("ordinal") in owners:
        i = owners.index(seg.get("ordinal"))
    else:
        i = bisect.bisect_right(steps, start)
    if i >= len(steps) or i >= len(values) or finite(values[i]) is None:
        return None
    j = bisect.bisect_right(steps, start) - 1
    before = finite(values[j]) if 0 <= j < len(values) else None
    hover = f"resume from {start:g}<br>step {steps[i]}: lr {float(values[i]):.3e}"
    if before is not None:
        hover += f"<br>before the resume (step {steps[j]}): lr {before:.3e}"
    return float(steps[i]), float(values[i]), hover


def telemetry_figure(view: RunView) -> go.Figure:
    """One line per GPU of the run's telemetry over steps; checkpoint saves as dotted lines."""
    traces: list[go.Scatter] = []
    for item in view.telemetry:
        pairs = [
            (s, v)
            for s, v in zip(item.get("steps") or [], item.get("values") or [], strict=False)
            if finite(s) is not None
        ]
        if not pairs:
            continue
        traces.append(
            go.Scatter(
                name=_gpu_label(item, with_host=True),
                x=[p[0] for p in pairs],
                y=[finite(p[1]) for p in pairs],
                mode="lines",
                line={"color": style.colour(len(traces)), "width": 1.3},
                connectgaps=False,
                hovertemplate="step %{x:.0f}<br>%{y:.4g}",
            )
        )
    if not traces:
        return empty_figure("No GPU telemetry for this run")
    shapes = style.checkpoint_lines(view.checkpoints, "save")
    metric = str(view.telemetry[0].get("metric") or "")
    layout = style.base_layout(
        f"telemetry-{view.run.get('id')}-{metric}",
        xaxis={"title": {"text": "step"}},
        yaxis={"title": {"text": style.axis_title(metric)}},
        shapes=shapes,
    )
    return go.Figure(data=traces, layout=layout)


def _gpu_label(item: dict[str, Any], *, with_host: bool) -> str:
    index = item.get("gpu_index")
    gpu = f"GPU {index}" if index is not None else str(item.get("gpu") or "GPU")
    host = item.get("host")
    return text(f"{host} · {gpu}" if with_host and host else gpu)


def node_figure(payload: dict[str, Any]) -> go.Figure:
    """Each GPU of a node over time; scrape gaps (> 3x the median interval) stay gaps."""
    metric = str(payload.get("metric") or "")
    traces: list[go.Scatter] = []
    for item in payload.get("series") or []:
        times, values = break_gaps(item.get("times") or [], item.get("values") or [])
        if not times:
            continue
        traces.append(
            go.Scatter(
                name=_gpu_label(item, with_host=False),
                x=[datetime.fromtimestamp(t, UTC).replace(tzinfo=None) for t in times],
                y=values,
                mode="lines",
                line={"color": style.colour(len(traces)), "width": 1.3},
                connectgaps=False,
                hovertemplate="%{x|%H:%M:%S}<br>%{y:.4g}",
            )
        )
    if not traces:
        return empty_figure(f"No {metric or 'telemetry'} readings in this window")
    layout = style.base_layout(
        f"node-{payload.get('node_id')}-{metric}",
        xaxis={"title": {"text": "time (UTC)"}, "type": "date"},
        yaxis={"title": {"text": style.axis_title(metric)}},
    )
    return go.Figure(data=traces, layout=layout)


def break_gaps(times: list[Any], values: list[Any]) -> tuple[list[float], list[float | None]]:
    """Points sorted by time, with a None inserted mid-way across every gap longer than
    ``GAP_FACTOR`` times the median interval, so lines do not bridge missing scrapes."""
    points = sorted(
        ((t, finite(v)) for t, v in zip(map(finite, times), values, strict=False) if t is not None),
        key=lambda p: p[0],
    )
    steps = [b[0] - a[0] for a, b in itertools.pairwise(points) if b[0] > a[0]]
    limit = GAP_FACTOR * median(steps) if len(steps) >= 2 else None
    out_t: list[float] = []
    out_v: list[float | None] = []
    for i, (t, v) in enumerate(points):
        if limit is not None and i and t - points[i - 1][0] > limit:
            out_t.append((t + points[i - 1][0]) / 2)
            out_v.append(None)
        out_t.append(t)
        out_v.append(v)
    return out_t, out_v

"""The run page's main figure: metrics over steps with the coverage heatmap behind them,
checkpoint saves, resumes with their replayed ranges, replayed points and findings."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from app.services.dashboard import RunView
from frontend.figures import style
from frontend.figures.style import DASH, finite, text, wrapped

COVERAGE_AXIS = "y2"


def run_figure(view: RunView, metrics: list[str], *, show_coverage: bool = True) -> go.Figure:
    """One shared step axis: ``metrics`` as lines (first left, second right, others on hidden
    own-scale axes), the coverage heatmap behind them, checkpoints, resumes and findings."""
    keys = [m for m in dict.fromkeys(metrics) if _has_points(view.series.get(m))]
    heatmap = coverage_heatmap(view.coverage) if show_coverage else None
    if not keys and heatmap is None:
        return style.empty_figure("No metrics logged for this run yet")
    first = view.series.get(keys[0]) if keys else None
    traces: list[go.BaseTraceType] = [] if heatmap is None else [heatmap]
    traces += [_line(view.series[key], key, i) for i, key in enumerate(keys)]
    if keys and _has_points(view.replayed.get(keys[0])):
        traces.append(_replayed(view.replayed[keys[0]], keys[0]))
    traces += _finding_traces(view.findings, first)
    checkpoints = _checkpoint_trace(view.checkpoints, first)
    if checkpoints is not None:
        traces.append(checkpoints)
    shapes, annotations = style.resume_marks(view.segments)
    shapes = [*style.checkpoint_lines(view.checkpoints, "checkpoint"), *shapes]
    layout = style.base_layout(
        f"run-{view.run.get('id')}",
        title={"text": _title(view.run), "x": 0.01, "xanchor": "left", "font": {"size": 14}},
        margin={"l": 60, "r": 60, "t": 90, "b": 50},
        shapes=shapes,
        annotations=annotations,
        **_axes(keys, heatmap is not None),
    )
    return go.Figure(data=traces, layout=layout)


def coverage_heatmap(coverage: dict[str, Any] | None) -> go.Heatmap | None:
    """Designed epochs (x: step edges) by dataset-index bins (y) coloured by mean times seen."""
    if not coverage:
        return None
    x_edges = list(coverage.get("step_edges") or [])
    y_edges = list(coverage.get("index_edges") or [])
    z = [list(row) if isinstance(row, list) else [] for row in coverage.get("mean_seen") or []]
    cols, rows = len(x_edges) - 1, len(y_edges) - 1
    if cols < 1 or rows < 1 or len(z) != rows or any(len(row) != cols for row in z):
        return None
    epochs = [e for e in coverage.get("epochs") or [] if isinstance(e, dict)]
    unseen = _grid(coverage.get("unseen"), rows, cols)
    repeated = _grid(coverage.get("repeated"), rows, cols)
    hover = [
        [_cell_text(epochs, c, y_edges[r], y_edges[r + 1], unseen[r][c], repeated[r][c], z[r][c])
         for c in range(cols)]
        for r in range(rows)
    ]  # fmt: skip
    return go.Heatmap(
        name="coverage",
        x=x_edges,
        y=y_edges,
        z=[[finite(v) for v in row] for row in z],
        zmin=0,
        zmax=2,
        colorscale=style.COVERAGE_COLORSCALE,
        opacity=style.COVERAGE_OPACITY,
        text=hover,
        hoverinfo="text",
        yaxis=COVERAGE_AXIS,
        zorder=-1,
        showlegend=False,
        colorbar={
            "title": {"text": "seen", "side": "right"},
            "tickvals": [0, 1, 2],
            "ticktext": ["never", "once", "twice+"],
            "orientation": "h",
            "x": 1,
            "xanchor": "right",
            "y": 1.02,
            "yanchor": "bottom",
            "len": 0.3,
            "thickness": 10,
        },
    )


def _grid(value: Any, rows: int, cols: int) -> list[list[Any]]:
    """``value`` if it is a rows x cols grid, else all None."""
    rows_ok = isinstance(value, list) and len(value) == rows
    if rows_ok and all(isinstance(row, list) and len(row) == cols for row in value):
        return value
    return [[None] * cols for _ in range(rows)]


def _pct(share: Any) -> str:
    number = finite(share)
    if number is None:
        return "?%"
    pct = number * 100
    return f"{pct:.1f}%" if 0 < pct < 1 else f"{pct:.0f}%"


def _cell_text(
    epochs: list[dict[str, Any]], col: int, lo: Any, hi: Any, unseen: Any, rep: Any, seen: Any
) -> str:
    info = epochs[col] if col < len(epochs) else {}
    first, last = int(finite(lo) or 0), int(finite(hi) or 0)
    head = f"epoch {text(info.get('epoch', col))}, samples {first:,}{DASH}{max(first, last - 1):,}"
    mean = finite(seen)
    if mean is None:
        return f"{head}: not reached"
    note = "" if info.get("complete", True) else " (epoch in progress)"
    return (
        f"{head}: {_pct(unseen)} unseen, {_pct(rep)} repeated{note}"
        f"<br>seen {mean:.2f}{style.TIMES} on average"
    )


def _has_points(series: dict[str, list[Any]] | None) -> bool:
    return bool(series and series.get("steps"))


def _line(series: dict[str, list[Any]], key: str, index: int) -> go.Scatter:
    return go.Scatter(
        name=text(key),
        x=series["steps"],
        y=series.get("values") or [],
        mode="lines",
        line={"color": style.colour(index), "width": 1.6},
        connectgaps=False,
        yaxis="y" if index == 0 else f"y{index + 2}",
        hovertemplate="step %{x}<br>%{y:.4g}",
        zorder=1,
    )


def _replayed(series: dict[str, list[Any]], key: str) -> go.Scatter:
    return go.Scatter(
        name="replayed",
        x=series["steps"],
        y=series.get("values") or [],
        mode="markers",
        marker={"color": style.REPLAYED_COLOUR, "size": 4},
        hovertemplate=f"replayed {text(key)}<br>step %{{x}}<br>%{{y:.4g}}<extra></extra>",
        zorder=2,
    )


def _marker_y(series: dict[str, list[Any]] | None, step: float) -> float:
    """The first metric's value at ``step``, else the top of its values, else 0."""
    if not series:
        return 0.0
    steps, values = series.get("steps") or [], series.get("values") or []
    near = style.value_near(steps, values, step)
    if near is not None:
        return near
    highest = style.top(values)
    return 0.0 if highest is None else highest


def _finding_traces(
    findings: list[dict[str, Any]], series: dict[str, list[Any]] | None
) -> list[go.Scatter]:
    groups: dict[str, list[dict[str, Any]]] = {name: [] for name in style.SEVERITIES}
    for finding in findings:
        if finite(finding.get("step")) is not None:
            groups[style.severity_of(finding.get("severity"))].append(finding)
    traces = []
    for severity, items in groups.items():
        if not items:
            continue
        steps = [float(f["step"]) for f in items]
        traces.append(
            go.Scatter(
                name=severity,
                x=steps,
                y=[_marker_y(series, s) for s in steps],
                mode="markers",
                marker={
                    "color": style.SEVERITY_COLOURS[severity],
                    "symbol": style.SEVERITY_SYMBOLS[severity],
                    "size": 11 if severity == "critical" else 9,
                    "line": {"width": 1, "color": "white"},
                },
                hovertext=[_finding_text(f, severity) for f in items],
                hoverinfo="text",
                zorder=3,
            )
        )
    return traces


def _finding_text(finding: dict[str, Any], severity: str) -> str:
    span = f"step {text(finding.get('step'))}"
    if finding.get("step_end") not in (None, finding.get("step")):
        span += f"{DASH}{text(finding['step_end'])}"
    resume = finding.get("resume_from_step")
    after = "" if resume is None else f", after the resume from {text(resume)}"
    kind = text(finding.get("kind") or "finding")
    return f"<b>{kind}</b> ({severity}), {span}{after}<br>{wrapped(finding.get('message', ''))}"


def _checkpoint_trace(
    checkpoints: list[dict[str, Any]], series: dict[str, list[Any]] | None
) -> go.Scatter | None:
    """Hoverable markers on the first metric at each save (the lines themselves cannot hover)."""
    items = [c for c in checkpoints if finite(c.get("step")) is not None]
    if not items:
        return None
    steps = [float(c["step"]) for c in items]
    return go.Scatter(
        name="checkpoints",
        x=steps,
        y=[_marker_y(series, s) for s in steps],
        mode="markers",
        marker={
            "symbol": "line-ns-open",
            "size": 14,
            "line": {"width": 2},
            "color": [style.verdict_colour(c.get("verdict")) for c in items],
        },
        hovertext=[_checkpoint_text(c) for c in items],
        hoverinfo="text",
        zorder=2,
    )


def _checkpoint_text(ckpt: dict[str, Any]) -> str:
    lines = [f"checkpoint <b>{text(ckpt.get('name', ''))}</b> at step {text(ckpt.get('step'))}"]
    lines.append(f"verdict: {text(ckpt.get('verdict') or 'unknown')}")
    missing = [name for name, held in (ckpt.get("components") or {}).items() if not held]
    if missing:
        lines.append(f"missing: {text(', '.join(map(str, missing)))}")
    seconds = finite(ckpt.get("save_seconds"))
    if seconds is not None:
        lines.append(f"saved in {seconds:.1f} s")
    lines += [wrapped(reason) for reason in ckpt.get("reasons") or []]
    return "<br>".join(lines)


def _title(run: dict[str, Any]) -> str:
    name = text(run.get("name") or f"run {run.get('id', '')}")
    project = run.get("project")
    return f"{name} <span style='color:#888'>· {text(project)}</span>" if project else name


def _axes(keys: list[str], coverage: bool) -> dict[str, Any]:
    two_right = coverage and len(keys) > 1
    axes: dict[str, Any] = {
        "xaxis": {
            "title": {"text": "step"},
            "domain": [0, 0.93 if two_right else 1],
            "showspikes": True,
            "spikemode": "across",
            "spikethickness": 1,
        },
        "yaxis": {"title": {"text": style.axis_title(keys[0]) if keys else ""}},
    }
    if coverage:
        axes["yaxis2"] = {
            "title": {"text": "dataset index"},
            "overlaying": "y",
            "side": "right",
            "showgrid": False,
            "zeroline": False,
            **({"anchor": "free", "position": 1.0} if two_right else {"anchor": "x"}),
        }
    for i, key in enumerate(keys[1:], start=1):
        axis: dict[str, Any] = {"overlaying": "y", "showgrid": False, "zeroline": False}
        if i == 1:
            axis.update(side="right", anchor="x", title={"text": style.axis_title(key)})
            axis["title"]["font"] = {"color": style.colour(i)}
        else:
            axis["visible"] = False  # its own scale; hover shows the true values
        axes[f"yaxis{i + 2}"] = axis
    return axes

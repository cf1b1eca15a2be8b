"""Colours, escaping and layout helpers shared by the figure builders."""

from __future__ import annotations

import bisect
import itertools
import math
import textwrap
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from app.telemetry.fields import METRICS

PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#7f7f7f",
    "#d62728",
)
SEVERITIES = ("critical", "warning", "info")
SEVERITY_COLOURS = {"critical": "#d62728", "warning": "#ff9f1c", "info": "#4c78a8"}
SEVERITY_SYMBOLS = {"critical": "x", "warning": "triangle-up", "info": "circle"}
VERDICT_COLOURS = {"safe": "#7f8c8d", "unsafe": "#e8590c"}
UNKNOWN_VERDICT_COLOUR = "#b0b0b0"
RESUME_COLOUR = "#6c3483"
REPLAYED_COLOUR = "rgba(120, 120, 120, 0.45)"
UNSEEN_COLOUR = "#d62728"
REPEATED_COLOUR = "#1f5fbf"
# mean times seen, zmin=0 .. zmax=2: never (red), once as designed (near white), twice+ (blue)
COVERAGE_COLORSCALE = [[0.0, UNSEEN_COLOUR], [0.5, "#f4f4f4"], [1.0, REPEATED_COLOUR]]
COVERAGE_OPACITY = 0.35
WRAP = 80
DASH = "\u2013"  # en dash, for step and sample ranges
TIMES = "\u00d7"
FONT = {"family": "Inter, Helvetica, Arial, sans-serif", "size": 12}


def text(value: Any) -> str:
    """User-controlled text made inert for plotly's pseudo-HTML labels (``<``, ``>``, ``&``)."""
    return str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def wrapped(value: Any, width: int = WRAP) -> str:
    """Escaped text broken into ``<br>``-joined lines, for long hover messages."""
    lines = textwrap.wrap(str(value), width) or [""]
    return "<br>".join(text(line) for line in lines)


def colour(index: int) -> str:
    """A distinct colour per index: the palette, then golden-angle hues."""
    if index < len(PALETTE):
        return PALETTE[index]
    return f"hsl({(index * 137.508) % 360:.0f}, 60%, 45%)"


def severity_of(value: Any) -> str:
    """One of :data:`SEVERITIES`; ``error`` counts as critical, anything unknown as warning."""
    name = str(value or "").lower()
    if name == "error":
        return "critical"
    return name if name in SEVERITIES else "warning"


def verdict_colour(verdict: Any) -> str:
    return VERDICT_COLOURS.get(str(verdict), UNKNOWN_VERDICT_COLOUR)


def axis_title(metric: str) -> str:
    """Escaped metric name with its canonical telemetry unit when known (``power (W)``)."""
    spec = METRICS.get(metric)
    if spec is None or spec.unit in ("1", ""):
        return text(metric)
    return f"{text(metric)} ({text(spec.unit)})"


def finite(value: Any) -> float | None:
    """``value`` as a float, or None when missing or not finite."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def value_near(steps: Sequence[Any], values: Sequence[Any], step: float) -> float | None:
    """The value of the point nearest ``step`` (steps ascending), None if missing there."""
    if not steps or len(steps) != len(values):
        return None
    i = bisect.bisect_left(steps, step)
    best = [j for j in (i - 1, i) if 0 <= j < len(steps)]
    j = min(best, key=lambda k: abs(steps[k] - step))
    return finite(values[j])


def top(values: Sequence[Any]) -> float | None:
    """The largest finite value, or None."""
    numbers = [v for v in (finite(x) for x in values) if v is not None]
    return max(numbers) if numbers else None


def replayed_ranges(segments: list[dict[str, Any]]) -> list[tuple[dict[str, Any], float | None]]:
    """Each resume (ordinal > 0, with a start step) and the end of what it replayed, if any."""
    ordered = sorted(segments, key=lambda s: finite(s.get("ordinal")) or 0.0)
    out: list[tuple[dict[str, Any], float | None]] = []
    for prev, seg in itertools.pairwise(ordered):
        start = finite(seg.get("start_step"))
        if not seg.get("ordinal") or start is None:
            continue
        end = finite(prev.get("end_step"))
        out.append((seg, end if end is not None and end > start else None))
    return out


def vline(x: float, colour_: str, dash: str, width: float = 1.0, **extra: Any) -> dict[str, Any]:
    """A full-height vertical line shape at step ``x``."""
    return {
        "type": "line",
        "x0": x,
        "x1": x,
        "xref": "x",
        "y0": 0,
        "y1": 1,
        "yref": "paper",
        "line": {"color": colour_, "width": width, "dash": dash},
        "layer": "above",
        **extra,
    }


def checkpoint_lines(checkpoints: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """A dotted full-height line per checkpoint save, coloured by its verdict."""
    return [
        vline(float(c["step"]), verdict_colour(c.get("verdict")), "dot", name=name)
        for c in checkpoints
        if finite(c.get("step")) is not None
    ]


def resume_marks(
    segments: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Per resume: a dashed line at its start, its replayed range shaded, a hoverable label."""
    shapes: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    for k, (seg, end) in enumerate(replayed_ranges(segments)):
        start = float(seg["start_step"])
        if end is not None:
            shapes.append(
                {
                    "type": "rect",
                    "name": "replayed range",
                    "x0": start,
                    "x1": end,
                    "xref": "x",
                    "y0": 0,
                    "y1": 1,
                    "yref": "paper",
                    "fillcolor": RESUME_COLOUR,
                    "opacity": 0.12,
                    "line": {"width": 0},
                    "layer": "above",
                }
            )
        shapes.append(vline(start, RESUME_COLOUR, "dash", 1.5, name="resume"))
        annotations.append(
            {
                "text": f"resume from {start:g}",
                "hovertext": resume_text(seg, start, end),
                "x": start,
                "xref": "x",
                "y": 1 - 0.07 * (k % 3),
                "yref": "paper",
                "xanchor": "left",
                "yanchor": "top",
                "showarrow": False,
                "font": {"size": 10, "color": RESUME_COLOUR},
                "bgcolor": "rgba(255,255,255,0.75)",
            }
        )
    return shapes, annotations


def resume_text(seg: dict[str, Any], start: float, end: float | None) -> str:
    lines = [f"segment {text(seg.get('ordinal'))} resumed from step {start:g}"]
    if seg.get("resumed_from"):
        lines.append(f"checkpoint: {wrapped(seg['resumed_from'])}")
    restored = seg.get("restored")
    if restored:
        lines.append(f"restored: {text(', '.join(map(str, restored)))}")
    if end is not None:
        lines.append(f"replayed steps {start + 1:g}{DASH}{end:g}")
    return "<br>".join(lines)


def base_layout(uirevision: str, **extra: Any) -> dict[str, Any]:
    """Layout defaults: white template, top legend, compact margins, zoom kept on updates."""
    layout: dict[str, Any] = {
        "template": "plotly_white",
        "font": FONT,
        "uirevision": uirevision,
        "margin": {"l": 60, "r": 30, "t": 60, "b": 50},
        "legend": {"orientation": "h", "x": 0, "y": 1.02, "xanchor": "left", "yanchor": "bottom"},
        "hovermode": "closest",
        "hoverlabel": {"align": "left"},
    }
    layout.update(extra)
    return layout


def empty_figure(message: str) -> go.Figure:
    """A blank figure saying ``message`` (escaped) in its centre."""
    fig = go.Figure()
    fig.update_layout(
        template="plotly_white",
        font=FONT,
        xaxis={"visible": False},
        yaxis={"visible": False},
        margin={"l": 20, "r": 20, "t": 20, "b": 20},
        annotations=[
            {
                "text": wrapped(message),
                "x": 0.5,
                "y": 0.5,
                "xref": "paper",
                "yref": "paper",
                "showarrow": False,
                "font": {"size": 14, "color": "#666"},
            }
        ],
    )
    return fig

"""Pure plotly figure builders for the dashboard: data in, ``go.Figure`` out."""

from frontend.figures.compare import compare_figure
from frontend.figures.panels import (
    coverage_bars,
    lr_figure,
    node_figure,
    telemetry_figure,
)
from frontend.figures.run import run_figure
from frontend.figures.style import empty_figure, text

__all__ = [
    "compare_figure",
    "coverage_bars",
    "empty_figure",
    "lr_figure",
    "node_figure",
    "run_figure",
    "telemetry_figure",
    "text",
]

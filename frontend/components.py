"""Small shared pieces of the pages. User-supplied text only ever goes in as children (React
escapes it), never as HTML or Markdown."""

from __future__ import annotations

from typing import Any

from dash import html

CHECK, CROSS = "\u2713", "\u2717"


def verdict_badge(verdict: str | None) -> html.Span:
    label = verdict or "not analysed"
    return html.Span(label, className=f"badge badge-{verdict or 'none'}")


def severity_badge(severity: str) -> html.Span:
    return html.Span(severity, className=f"badge severity-{severity}")


def table(header: list[str], rows: list[list[Any]], class_name: str = "grid") -> html.Table:
    return html.Table(
        [
            html.Thead(html.Tr([html.Th(h) for h in header])),
            html.Tbody([html.Tr([html.Td(cell) for cell in row]) for row in rows]),
        ],
        className=class_name,
    )


def stat(label: str, value: Any) -> html.Div:
    return html.Div([html.Div(label, className="stat-label"), html.Div(value, className="stat")])


def fmt_step(step: int | None) -> str:
    return "" if step is None else f"{step:,}"

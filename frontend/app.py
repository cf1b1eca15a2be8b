"""The Dash app: runs, a run's page, compare, nodes, alerts. Mounted under the FastAPI app by
``app.api.main.create_app`` so ``runwatch serve`` serves API and dashboard on one port."""

from __future__ import annotations

from pathlib import Path

import dash
from dash import Dash, dcc, html

HERE = Path(__file__).parent


def create_dash() -> Dash:
    app = Dash(
        __name__,
        use_pages=True,
        pages_folder=str(HERE / "pages"),
        assets_folder=str(HERE / "assets"),
        title="Runwatch",
        suppress_callback_exceptions=True,
        update_title="",
    )
    app.layout = html.Div(
        [
            html.Header(
                [
                    dcc.Link("Runwatch", href="/", className="brand"),
                    html.Nav(
                        [
                            dcc.Link("Runs", href="/"),
                            dcc.Link("Compare", href="/compare"),
                            dcc.Link("Nodes", href="/nodes"),
                            dcc.Link("Alerts", href="/alerts"),
                            html.A("API", href="/docs"),
                        ]
                    ),
                ],
                className="topbar",
            ),
            html.Main(dash.page_container, className="page"),
        ]
    )
    return app

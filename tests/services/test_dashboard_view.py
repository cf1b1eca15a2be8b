"""What the run page is built from: a long series comes from its stored preview, spikes kept."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import Engine

from app.config import Settings
from app.db import session_scope
from app.services.dashboard import run_view
from tests.helpers import ingest_path


def test_long_series_is_drawn_from_its_preview_with_the_spike(
    engine: Engine, settings: Settings, tmp_path: Path
) -> None:
    run = tmp_path / "long"
    run.mkdir()
    rows = [{"step": s, "loss": 1.0 + (s % 7) / 100, "lr": 1e-3} for s in range(1, 50_001)]
    rows[31_337]["loss"] = 42.0  # one bad batch
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    job = ingest_path(engine, settings, run)
    with session_scope(engine) as session:
        view = run_view(session=session, run_id=job.run_id, metrics=["loss"], max_points=1000)
    assert view is not None
    loss = view.series["loss"]
    assert len(loss["steps"]) <= 1000
    assert max(loss["values"]) == 42.0 and 31_338 in loss["steps"]
    assert loss["steps"][0] == 1 and loss["steps"][-1] == 50_000

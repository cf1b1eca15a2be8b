"""How fast a 1M-step run's page is: server-side assembly and, with --browser, the full page
in headless Chromium until the main figure is drawn.

Builds a run directory with 1,000,000 steps (loss, lr, grad_norm; a crash at 600,000 and a
resume from 590,000) and an 8-id sample trace per step, ingests it into a temporary SQLite
database, then times run_view + run_figure + JSON (what the page's first request does).
Run: python -m bench.dashboard_page [--steps N] [--browser]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson
import plotly.io as pio

from app import migrate
from app.config import Settings
from app.db import make_engine, session_scope
from app.services import ingest as ingest_service
from app.services.dashboard import run_view
from app.services.sources import store_path
from frontend.figures import run_figure


def write_run(folder: Path, steps: int, crash: int, resume: int, per_step: int = 8) -> None:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    size = steps * per_step // 10  # ten epochs
    rows = list(range(1, crash + 1)) + list(range(resume + 1, steps + 1))
    loss = np.exp(rng.normal(np.log(np.linspace(4, 1.2, steps + 1)), 0.05))
    with (
        (folder / "metrics.jsonl").open("wb") as metrics,
        (folder / "samples.jsonl").open("wb") as samples,
    ):
        order = rng.permutation(size)
        for step in rows:
            epoch_pos = ((step - 1) * per_step) % size
            if epoch_pos == 0:
                order = np.random.default_rng(step).permutation(size)
            ids = order[epoch_pos : epoch_pos + per_step].tolist()
            metrics.write(
                orjson.dumps(
                    {
                        "step": step,
                        "loss": float(loss[step]),
                        "lr": 3e-4,
                        "grad_norm": 1.0,
                        "time": 1.7e9 + step * 0.01,
                    }
                )
                + b"\n"
            )
            samples.write(orjson.dumps({"step": step, "sample_ids": ids}) + b"\n")
    events = [
        {"event": "process_start", "step": 0, "time": 1.7e9, "resumed_from": None},
        {"event": "process_exit", "step": crash, "time": 1.7e9 + crash * 0.01, "reason": "crash"},
        {
            "event": "process_start",
            "step": resume,
            "time": 1.7e9 + crash * 0.01 + 600,
            "resumed_from": None,
            "restored": ["model", "optimizer", "scheduler", "rng"],
        },
    ]
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--browser", action="store_true", help="also time the page in Chromium")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    settings = Settings(home=tmp / "home", database_url=f"sqlite:///{tmp}/bench.db")
    engine = make_engine(settings.sqlalchemy_url)
    migrate.upgrade(engine)
    crash, resume = int(args.steps * 0.6), int(args.steps * 0.59)
    started = time.perf_counter()
    write_run(tmp / "big", args.steps, crash, resume)
    source = store_path(tmp / "big", settings)
    with session_scope(engine) as session:
        job_id = ingest_service.submit(
            session=session, source=source, project="bench", run_name="big"
        ).id
    job = ingest_service.run_job(engine=engine, settings=settings, job_id=job_id)
    assert job.state == "succeeded", job.error
    prepared = time.perf_counter() - started
    timings = []
    for _ in range(5):
        t = time.perf_counter()
        with session_scope(engine) as session:
            view = run_view(session=session, run_id=job.run_id or 0)
        assert view is not None
        pio.to_json(run_figure(view, ["loss"]))
        timings.append(time.perf_counter() - t)
    result = {
        "steps": args.steps,
        "prepare_seconds": round(prepared, 1),
        "server_ms_median": round(statistics.median(timings) * 1000),
        "points_drawn": len(view.series["loss"]["steps"]),
    }
    if args.browser:
        result["browser_ms"] = _browser(settings, job.run_id or 0)
    print(json.dumps(result, indent=2))


def _browser(settings: Settings, run_id: int) -> int:
    from playwright.sync_api import sync_playwright

    from tests.procs import free_port

    port = free_port()
    env = {
        **os.environ,
        "RUNWATCH_DATABASE_URL": settings.sqlalchemy_url,
        "RUNWATCH_HOME": str(settings.resolved_home),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--port", str(port), "--no-worker"], env=env
    )
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            page = browser.new_page()
            for _ in range(100):
                try:
                    page.goto(f"http://127.0.0.1:{port}/api/v1/health")
                    break
                except Exception:
                    time.sleep(0.2)
            page.goto(f"http://127.0.0.1:{port}/runs/{run_id}")  # warm the server
            page.wait_for_selector("#run-figure .js-plotly-plot .main-svg")
            t = time.perf_counter()
            page.goto(f"http://127.0.0.1:{port}/runs/{run_id}")
            page.wait_for_selector("#run-figure .js-plotly-plot .main-svg")
            elapsed = time.perf_counter() - t
            browser.close()
        return round(elapsed * 1000)
    finally:
        proc.terminate()
        proc.wait(timeout=20)


if __name__ == "__main__":
    main()

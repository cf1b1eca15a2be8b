"""stall_on_save with GPU telemetry synthesized around its save windows (every save of that run
takes 25 s, and the GPUs idle while one is written): each save gets a checkpoint_stall finding
with the GPU-seconds it cost."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from sqlalchemy import Engine

from app.config import Settings
from app.db import session_scope
from app.models import Node, Run
from app.services import run_telemetry
from app.services.findings import list_findings
from app.services.telemetry_store import store_scrape
from app.telemetry.samples import GpuSample, Scrape
from tests.helpers import ingest_path

GPUS = ("GPU-0a", "GPU-1b", "GPU-2c", "GPU-3d")


def _save_windows(run_dir: Path) -> list[tuple[int, float, float]]:
    out = []
    for manifest in sorted(run_dir.glob("checkpoints/*/manifest.json")):
        doc = json.loads(manifest.read_text())
        out.append((doc["step"], doc["time_start"], doc["time_end"]))
    return out


def test_blocking_saves_of_stall_on_save_cost_their_duration_on_every_gpu(
    engine: Engine, settings: Settings, example_runs: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "stall_on_save"
    shutil.copytree(example_runs / "stall_on_save", run_dir)
    (run_dir / "config.json").write_text(json.dumps({"telemetry": {"nodes": ["node-a"]}}))
    windows = _save_windows(run_dir)
    first = min(w[1] for w in windows) - 90.0
    last = max(w[2] for w in windows) + 60.0
    with session_scope(engine) as session:
        node = Node(name="node-a", kind="dcgm", url="http://node-a:9400/metrics", labels={})
        session.add(node)
        session.flush()
        for at in np.arange(first, last, 1.0):  # one scrape a second, four GPUs
            idle = any(a <= at <= b for _, a, b in windows)
            power = 72.0 if idle else 630.0
            samples = [
                GpuSample(
                    "power", power, "node-a", gpu, i, "H100", {}, "DCGM_FI_DEV_POWER_USAGE", None
                )
                for i, gpu in enumerate(GPUS)
            ]
            store_scrape(session, node, Scrape(samples, [], "test"), at=float(at))

    job = ingest_path(engine, settings, run_dir)
    assert job.state == "succeeded", job.error
    with session_scope(engine) as session:
        stalls = {
            f.step: f
            for f in list_findings(session=session, run_id=job.run_id, kind="checkpoint_stall")
        }
        run = session.get(Run, job.run_id)
        assert run is not None and run.verdict == "warn"
        axis = run_telemetry.step_axis(session, run)
        power = run_telemetry.run_series(session, run, "power")
        assert sorted(s.gpu for s in power) == list(GPUS)
        mapped = run_telemetry.to_steps(np.array([axis[0][0] - 30.0, axis[0][-1]]), axis)
        assert mapped == [None, 840.0]  # outside the logged range: no step
    assert set(stalls) == {s for s, _, _ in windows} == {100, 200, 300, 400, 500, 600, 700, 800}
    for step, finding in stalls.items():
        seconds = next(b - a for s, a, b in windows if s == step)
        lost = finding.evidence["gpu_seconds_lost"]
        assert abs(lost - len(GPUS) * seconds) < 0.05, (step, lost, seconds)
        assert finding.evidence["blocking"] is True
        assert f"on {len(GPUS)} of {len(GPUS)} GPUs" in finding.message
    assert axis[0].size > 0

"""Each real format through the full ingest and analysis service, on SQLite and PostgreSQL, and
a W&B offline run plus a sample trace giving the same findings as the same run written as a run
directory."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from app.config import Settings
from app.db import session_scope
from app.services.findings import finding_dict, list_findings
from tests.helpers import ingest_path, segment_rows
from tests.ingest.wandb_runs import _env

WANDB_EXAMPLES = ("megatron_offset", "scheduler_reset", "exact_resume")

WRITER = """
import json, sys, time
import wandb
segments = json.load(open(sys.argv[1]))
for index, rows in enumerate(segments):
    run = wandb.init(project="equivalence", id=sys.argv[2], resume="allow" if index else None)
    for row in rows:
        run.log({k: v for k, v in row.items() if k not in ("step", "time")}, step=row["step"])
    run.finish(exit_code=0 if index == len(segments) - 1 else 1)
    time.sleep(1.1)  # a new folder timestamp for the next process
"""


def _segments(run_dir: Path) -> list[list[dict[str, Any]]]:
    """The metrics rows of each process, split where the next process started."""
    starts = [
        json.loads(line)["time"]
        for line in (run_dir / "events.jsonl").read_text().splitlines()
        if json.loads(line)["event"] == "process_start"
    ][1:]
    segments: list[list[dict[str, Any]]] = [[]]
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        while starts and row["time"] >= starts[0]:
            starts.pop(0)
            segments.append([])
        segments[-1].append(row)
    return segments


@pytest.fixture(scope="module")
def wandb_forms(tmp_path_factory: pytest.TempPathFactory, example_runs: Path) -> dict[str, Path]:
    """Each example's metrics logged again by the real wandb client (one offline process per
    segment, same run id), with the example's sample trace next to the wandb folder."""
    base = tmp_path_factory.mktemp("wandb-forms")
    procs = []
    for name in WANDB_EXAMPLES:
        folder = base / name
        folder.mkdir()
        plan = folder / "segments.json"
        plan.write_text(json.dumps(_segments(example_runs / name)))
        shutil.copy(example_runs / name / "samples.jsonl", folder / "samples.jsonl")
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", textwrap.dedent(WRITER), str(plan), name.replace("_", "")],
                env=_env(folder),
                cwd=folder,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        )
    for proc in procs:
        out, _ = proc.communicate(timeout=180)
        assert proc.returncode == 0, out.decode()[-2000:]
    for name in WANDB_EXAMPLES:
        (base / name / "segments.json").unlink()
    return {name: base / name for name in WANDB_EXAMPLES}


def _claims(engine: Engine, run_id: int) -> set[tuple[Any, ...]]:
    with session_scope(engine) as session:
        return {
            (f["resume_from_step"], f["kind"], f["severity"])
            for f in map(finding_dict, list_findings(session=session, run_id=run_id))
            if f["kind"] != "loss_spike"
        }


@pytest.mark.parametrize("name", WANDB_EXAMPLES)
def test_wandb_run_plus_samples_gives_the_run_directory_findings(
    name: str,
    engine: Engine,
    settings: Settings,
    example_runs: Path,
    wandb_forms: dict[str, Path],
) -> None:
    as_directory = ingest_path(engine, settings, example_runs / name, run="directory")
    as_wandb = ingest_path(engine, settings, wandb_forms[name], run="wandb")
    assert as_wandb.state == "succeeded", as_wandb.error
    assert as_wandb.counts["sample_ids"] == as_directory.counts["sample_ids"]
    assert as_wandb.counts["segments"] == as_directory.counts["segments"] == 2
    wandb_claims = _claims(engine, as_wandb.run_id)
    assert wandb_claims == _claims(engine, as_directory.run_id)
    assert wandb_claims  # a resume always yields a finding (resume_ok at least)
    assert [s.start_step for s in segment_rows(engine, as_wandb.run_id)] == [
        s.start_step for s in segment_rows(engine, as_directory.run_id)
    ]


def test_tensorboard_run_with_a_restart(engine: Engine, settings: Settings, tmp_path: Path) -> None:
    from tensorboardX import SummaryWriter

    logdir = tmp_path / "tb"
    first = SummaryWriter(str(logdir))
    for step in range(1, 101):
        first.add_scalar("train/loss", 2.0 / step, step)
        first.add_scalar("train/lr", 1e-3, step)
    first.close()
    time.sleep(1.1)  # the file name carries the start second: a restart gets its own file
    second = SummaryWriter(str(logdir), purge_step=81)  # a restart from step 80
    for step in range(81, 151):
        second.add_scalar("train/loss", 2.1 / step, step)
        second.add_scalar("train/lr", 1e-3, step)
    second.close()
    job = ingest_path(engine, settings, logdir)
    assert job.state == "succeeded", job.error
    assert job.counts["metric_points"] == 2 * 170 and job.counts["superseded_points"] == 2 * 20
    assert [s.start_step for s in segment_rows(engine, job.run_id)] == [0, 80]


def test_megatron_log_with_a_restart(engine: Engine, settings: Settings, tmp_path: Path) -> None:
    from tests.ingest.test_megatron import _iteration

    lines = [_iteration(i, loss=3.0 - i / 100) for i in range(1, 41)]
    lines += ["saving checkpoint at iteration      30 to checkpoints"]
    lines += [_iteration(i, loss=2.9 - i / 100) for i in range(31, 61)]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "train.log").write_text("\n".join(lines) + "\n")
    job = ingest_path(engine, settings, tmp_path / "run")
    assert job.state == "succeeded", job.error
    assert job.counts["metric_rows"] == 70 and job.counts["superseded_points"] > 0
    assert [s.start_step for s in segment_rows(engine, job.run_id)] == [0, 30]


def test_hugging_face_trainer_output(engine: Engine, settings: Settings, tmp_path: Path) -> None:
    from tests.ingest.test_hf_trainer import _train

    _train(tmp_path / "out", 12)
    job = ingest_path(engine, settings, tmp_path / "out")
    assert job.state == "succeeded", job.error
    assert job.counts["checkpoints"] == 3 and job.counts["metric_rows"] == 12
    with session_scope(engine) as session:
        kinds = {f.kind for f in list_findings(session=session, run_id=job.run_id)}
    assert kinds <= {"loss_spike"}  # an uninterrupted run: nothing to flag

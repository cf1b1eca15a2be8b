"""Damaged and hostile sources through the whole service (store, job, write, analysis) on both
backends: every job ends failed with a message naming a file, or succeeded; a failed job leaves
no rows behind and the run it aimed at keeps the data it had."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import Engine, select

from app.config import Settings
from app.db import session_scope
from app.models import MetricSeries, Project, Run
from tests.fuzz import harness, structures
from tests.fuzz.mutate import mutated_source
from tests.fuzz.seeds import Source
from tests.helpers import ingest_path, table_counts

TEXT = (".jsonl", ".json", ".log", ".txt")


def _fingerprint(engine: Engine) -> dict[str, Any]:
    """Everything a job may change: row counts, each run's summary and each series' size."""
    with session_scope(engine) as session:
        runs = session.execute(
            select(Project.name, Run.name, Run.source_sha256, Run.num_steps, Run.last_step)
            .join(Project)
            .order_by(Run.id)
        ).all()
        series = session.execute(
            select(MetricSeries.run_id, MetricSeries.key, MetricSeries.num_points).order_by(
                MetricSeries.id
            )
        ).all()
    return {"tables": table_counts(engine), "runs": runs, "series": series}


def _tar(source: Source, path: Path) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in source.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _sources(seeds: list[Source]) -> st.SearchStrategy[Source]:
    return st.one_of(
        mutated_source(seeds, text=TEXT),
        structures.run_directory(),
        structures.wandb_run(),
        structures.tensorboard_run(),
        structures.hf_run(),
        structures.megatron_run(),
    )


def test_jobs_fail_cleanly_or_succeed(
    engine: Engine,
    settings: Settings,
    tmp_path: Path,
    run_seeds: list[Source],
    wandb_seeds: list[Source],
    tensorboard_seeds: list[Source],
    hf_seeds: list[Source],
    megatron_seeds: list[Source],
) -> None:
    seeds = [*run_seeds[:2], *wandb_seeds, *tensorboard_seeds, *hf_seeds, *megatron_seeds]
    victim = ingest_path(engine, settings, _tar(run_seeds[0], tmp_path / "good.tar"), run="victim")
    assert victim.state == "succeeded", victim.error
    counter = iter(range(10**9))

    @harness.fuzz_settings(0.1, least=4)
    @given(st.data())
    def fuzz(data: st.DataObject) -> None:
        n = next(counter)
        source = data.draw(_sources(seeds), label="source")
        run = data.draw(st.sampled_from(["victim", f"new-{n}"]), label="run")
        before = _fingerprint(engine)
        harness.TRIED["service"] += 1
        job = ingest_path(engine, settings, _tar(source, tmp_path / f"s{n}.tar"), run=run)
        assert job.state in ("succeeded", "failed"), job.state
        harness.OUTCOMES["service", "parsed" if job.state == "succeeded" else "refused"] += 1
        if job.state == "failed":
            assert not job.error.startswith("internal error"), job.error
            assert len(job.error) <= harness.MAX_MESSAGE_CHARS
            assert _fingerprint(engine) == before, job.error
        else:
            assert not [w for w in job.warnings if w.startswith("analysis failed")], job.warnings
        harness.check_messages(job.warnings)

    fuzz()

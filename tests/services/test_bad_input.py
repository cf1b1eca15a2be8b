"""Bad input: a clear error naming file and line, the raw source kept, nothing half-ingested."""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import Engine

from app.config import Settings
from app.db import session_scope
from app.services import metrics as metric_service
from app.services.sources import source_file
from tests.helpers import ingest_path, table_counts

EMPTY = {
    "project": 0,
    "run": 0,
    "segment": 0,
    "event": 0,
    "metric_series": 0,
    "sample_chunk": 0,
    "checkpoint": 0,
}


@pytest.fixture
def run_copy(tmp_path: Path, example_runs: Path) -> Path:
    target = tmp_path / "src" / "exact_resume"
    shutil.copytree(example_runs / "exact_resume", target)
    return target


def _rewrite_line(path: Path, number: int, text: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[number - 1] = text + "\n"
    path.write_text("".join(lines))


def _assert_failed_cleanly(engine: Engine, settings: Settings, job, *needles: str) -> None:
    assert job.state == "failed"
    for needle in needles:
        assert needle in job.error, job.error
    stored = source_file(settings, job.source_key)
    assert stored.exists() and stored.stat().st_size == job.source_bytes
    assert job.run_id is None
    assert table_counts(engine) == EMPTY


CORRUPTIONS: dict[str, tuple[Callable[[Path], None], tuple[str, ...]]] = {
    "non-json line": (
        lambda d: _rewrite_line(d / "metrics.jsonl", 12, "this is not json"),
        ("metrics.jsonl line 12", "not valid JSON"),
    ),
    "line truncated mid-file": (
        lambda d: _rewrite_line(d / "metrics.jsonl", 30, '{"step": 30, "loss": 2.1, "lr'),
        ("metrics.jsonl line 30", "not valid JSON"),
    ),
    "string loss": (
        lambda d: _rewrite_line(d / "metrics.jsonl", 5, '{"step": 5, "loss": "high"}'),
        ("metrics.jsonl line 5", "'loss' must be a number"),
    ),
    "string step": (
        lambda d: _rewrite_line(d / "metrics.jsonl", 7, '{"step": "seven", "loss": 1.0}'),
        ("metrics.jsonl line 7", "'step' must be an integer"),
    ),
    "infinite time": (
        lambda d: _rewrite_line(
            d / "metrics.jsonl", 9, '{"step": 9, "loss": 1.0, "time": Infinity}'
        ),
        ("metrics.jsonl line 9", "'time' must be a finite number"),
    ),
    "float sample ids": (
        lambda d: _rewrite_line(d / "samples.jsonl", 3, '{"step": 3, "sample_ids": [1.5, 2.0]}'),
        ("samples.jsonl line 3", "flat list of integers"),
    ),
    "array instead of object": (
        lambda d: _rewrite_line(d / "events.jsonl", 2, "[1, 2, 3]"),
        ("events.jsonl line 2", "expected a JSON object"),
    ),
    "no metrics file": (
        lambda d: (d / "metrics.jsonl").unlink(),
        ("no run found: no metrics.jsonl",),
    ),
    "bad manifest field": (
        lambda d: (d / "checkpoints/step_000300/manifest.json").write_text('{"step": "300"}'),
        ("checkpoints/step_000300/manifest.json", "field 'step' must be an integer"),
    ),
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_corrupt_run_directory_fails_naming_file_and_line(
    case: str, engine: Engine, settings: Settings, run_copy: Path
) -> None:
    corrupt, needles = CORRUPTIONS[case]
    corrupt(run_copy)
    job = ingest_path(engine, settings, run_copy)
    _assert_failed_cleanly(engine, settings, job, *needles)


def test_truncated_last_line_is_skipped_with_a_warning(
    engine: Engine, settings: Settings, run_copy: Path
) -> None:
    metrics = run_copy / "metrics.jsonl"
    text = metrics.read_text()
    metrics.write_text(text + '{"step": 841, "loss": 0.0')  # a writer killed mid-line
    job = ingest_path(engine, settings, run_copy)
    assert job.state == "succeeded"
    assert job.counts["metric_rows"] == 877
    assert any("metrics.jsonl line 878: truncated last line" in w for w in job.warnings)


def test_nan_and_infinity_values_are_kept_and_reported(
    engine: Engine, settings: Settings, run_copy: Path
) -> None:
    _rewrite_line(
        run_copy / "metrics.jsonl", 40, '{"step": 40, "loss": NaN, "grad_norm": Infinity}'
    )
    job = ingest_path(engine, settings, run_copy)
    assert job.state == "succeeded"
    assert any("non-finite value(s) of 'loss' kept (first at line 40" in w for w in job.warnings)
    with session_scope(engine) as session:
        series = metric_service.find_series(session=session, run_id=job.run_id, key="grad_norm")
        assert series is not None
        points = metric_service.read_points(session=session, series_id=series.id)
        assert points.values[points.steps == 40].tolist() == [math.inf]
        loss = metric_service.find_series(session=session, run_id=job.run_id, key="loss")
        assert loss is not None
        values = metric_service.read_points(session=session, series_id=loss.id).values
        assert int(np.isnan(values).sum()) == 1


def test_line_longer_than_the_limit_fails(
    engine: Engine, settings: Settings, run_copy: Path
) -> None:
    settings.max_line_bytes = 4096
    ids = list(range(2000))
    _rewrite_line(run_copy / "samples.jsonl", 2, json.dumps({"step": 2, "sample_ids": ids}))
    job = ingest_path(engine, settings, run_copy)
    _assert_failed_cleanly(engine, settings, job, "samples.jsonl line 2", "longer than 4096 bytes")


def _tar_with(tmp_path: Path, run_dir: Path, extra: Callable[[tarfile.TarFile], None]) -> Path:
    archive = tmp_path / "upload.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(run_dir, arcname="exact_resume")
        extra(tar)
    return archive


def _add_member(name: str, data: bytes = b"x") -> Callable[[tarfile.TarFile], None]:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))

    return add


@pytest.mark.parametrize(
    ("member", "needle"),
    [("../escape.txt", "points outside the archive"), ("/etc/passwd2", "absolute path")],
)
def test_archive_with_escaping_paths_is_refused(
    member: str, needle: str, engine: Engine, settings: Settings, run_copy: Path, tmp_path: Path
) -> None:
    archive = _tar_with(tmp_path, run_copy, _add_member(member))
    job = ingest_path(engine, settings, archive)
    _assert_failed_cleanly(engine, settings, job, "upload.tar.gz", member, needle)
    assert not (tmp_path / "escape.txt").exists()


def test_links_in_an_archive_are_skipped_never_followed(
    engine: Engine, settings: Settings, run_copy: Path, tmp_path: Path
) -> None:
    def add_links(tar: tarfile.TarFile) -> None:
        link = tarfile.TarInfo("exact_resume/config.json")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        tar.addfile(link)

    archive = _tar_with(tmp_path, run_copy, add_links)
    job = ingest_path(engine, settings, archive)
    assert job.state == "succeeded"
    assert any("member 'exact_resume/config.json' is a link, skipped" in w for w in job.warnings)


def test_a_link_in_place_of_the_metrics_file_fails(
    engine: Engine, settings: Settings, tmp_path: Path
) -> None:
    archive = tmp_path / "linked.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        info = zipfile.ZipInfo("run/metrics.jsonl")
        info.external_attr = 0o120777 << 16  # a symlink
        zf.writestr(info, "/etc/passwd")
    job = ingest_path(engine, settings, archive)
    _assert_failed_cleanly(engine, settings, job, "no run found: no metrics.jsonl")
    assert any("is a link, skipped" in w for w in job.warnings)


def test_decompression_bomb_is_refused(engine: Engine, settings: Settings, tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.tar.gz"
    with tarfile.open(bomb, "w:gz") as tar:
        info = tarfile.TarInfo("run/metrics.jsonl")
        info.size = 300 << 20
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    assert bomb.stat().st_size < 1 << 20
    job = ingest_path(engine, settings, bomb)
    _assert_failed_cleanly(engine, settings, job, "bomb.tar.gz", "decompression bomb")


def test_failed_reingest_keeps_the_data_already_stored(
    engine: Engine, settings: Settings, run_copy: Path
) -> None:
    good = ingest_path(engine, settings, run_copy)
    before = table_counts(engine)
    _rewrite_line(run_copy / "metrics.jsonl", 100, "garbage")
    bad = ingest_path(engine, settings, run_copy)
    assert bad.state == "failed" and "metrics.jsonl line 100" in bad.error
    assert table_counts(engine) == before
    assert source_file(settings, bad.source_key).exists()
    assert source_file(settings, good.source_key).exists()


def test_changed_source_replaces_the_run_without_duplicates(
    engine: Engine, settings: Settings, run_copy: Path
) -> None:
    first = ingest_path(engine, settings, run_copy)
    with (run_copy / "metrics.jsonl").open("a") as f:
        f.write('{"step": 841, "loss": 0.01, "lr": 0.0, "grad_norm": 0.1, "epoch": 15}\n')
    second = ingest_path(engine, settings, run_copy)
    assert second.run_id == first.run_id
    assert second.counts["metric_rows"] == first.counts["metric_rows"] + 1
    assert table_counts(engine)["run"] == 1
    assert table_counts(engine)["segment"] == 2


def test_oversized_source_is_refused_before_storing(settings: Settings, run_copy: Path) -> None:
    from app.ingest.errors import IngestError
    from app.services.sources import store_path

    settings.max_source_bytes = 10_000
    with pytest.raises(IngestError, match="larger than the limit of 10000 bytes"):
        store_path(run_copy, settings)
    leftovers = list((settings.sources_path / "tmp").iterdir())
    assert leftovers == []
    assert os.listdir(settings.sources_path) == ["tmp"]

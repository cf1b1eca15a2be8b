"""Importing other tools' files: TensorBoard event files and a W&B offline run of 1M points.

TensorBoard: one event file written by tensorboardX (100,000 steps x 10 scalars). Runwatch's
reader (``app.ingest``, every point into arrays) against TensorBoard's own
``EventAccumulator(path, size_guidance={"scalars": 0}).Reload()`` (keep every point) on the same
file. W&B: an offline run written by the real ``wandb`` client (100,000 ``log`` calls of 10
keys). wandb keeps no Python reader of its transaction log any more (its sync is a Go binary
that talks to the server), so Runwatch's reader stands alone there. Both also go through a whole
ingest job into SQLite. Each side runs in its own child process (peak RSS).
Run: python -m bench file_import [--quick]
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import Row, Scale, fmt_rate, fmt_seconds, in_child
from bench.data import tensorboard_run, wandb_run


def runwatch_read(folder: str) -> dict[str, Any]:
    """Child: Runwatch's reader on a folder, into a ParsedRun (no database)."""
    from app.config import Settings
    from app.ingest.aliases import AliasTable
    from app.ingest.context import ReadContext
    from app.ingest.errors import Warnings
    from app.ingest.formats import read_source
    from app.ingest.source import DirectoryTree, Limits

    settings = Settings()
    warnings = Warnings()
    limits = Limits(
        max_source_bytes=settings.max_source_bytes,
        max_members=settings.max_archive_members,
        max_compression_ratio=settings.max_compression_ratio,
        max_line_bytes=settings.max_line_bytes,
    )
    started = time.perf_counter()
    tree = DirectoryTree(Path(folder), warnings, limits)
    ctx = ReadContext(tree, AliasTable(), warnings, max_line_bytes=settings.max_line_bytes)
    parsed = read_source(ctx)
    seconds = time.perf_counter() - started
    points = parsed.metrics.num_points + (parsed.evals.num_points if parsed.evals else 0)
    return {
        "format": parsed.source_format,
        "points": points,
        "keys": sorted(parsed.metrics.columns),
        "seconds": round(seconds, 3),
    }


def tensorboard_accumulator(folder: str) -> dict[str, Any]:
    """Child: TensorBoard's EventAccumulator keeping every scalar."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    started = time.perf_counter()
    acc = EventAccumulator(folder, size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    points = sum(len(acc.Scalars(tag)) for tag in tags)
    seconds = time.perf_counter() - started
    return {"points": points, "keys": sorted(tags), "seconds": round(seconds, 3)}


def run(scale: Scale) -> list[Row]:
    rows: list[Row] = []
    n = scale.import_points
    tb = tensorboard_run(n)
    ours = in_child("bench.file_import:runwatch_read", folder=str(tb))
    theirs = in_child("bench.file_import:tensorboard_accumulator", folder=str(tb))
    if ours["points"] != theirs["points"]:
        raise RuntimeError(f"point counts differ: Runwatch {ours['points']}, TB {theirs['points']}")
    rows.append(
        Row(
            f"TensorBoard import, {n:,} scalars (reader)",
            _cell(ours),
            "EventAccumulator(size_guidance=0): " + _cell(theirs),
            theirs["seconds"] / ours["seconds"],
            details={"runwatch": ours, "tensorboard": theirs},
        )
    )
    wb = wandb_run(n)
    ours = in_child("bench.file_import:runwatch_read", folder=str(wb))
    rows.append(
        Row(
            f"W&B offline import, {n:,} points (reader)",
            _cell(ours),
            "none: wandb has no Python reader of its offline files",
            details={"runwatch": ours},
        )
    )
    for name, folder in (("TensorBoard", tb), ("W&B", wb)):
        job = _ingest_job(folder)
        rows.append(
            Row(
                f"{name} import: whole ingest job into SQLite",
                f"{fmt_rate(job['points'] / job['whole_seconds'])}"
                f" ({fmt_seconds(job['whole_seconds'])}), {job['peak_rss_mb']} MB",
                details={"runwatch": job},
            )
        )
    return rows


def _cell(result: dict[str, Any]) -> str:
    return (
        f"{fmt_seconds(result['seconds'])}, {fmt_rate(result['points'] / result['seconds'])},"
        f" {result['peak_rss_mb']} MB"
    )


def _ingest_job(folder: Path) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="runwatch-bench-"))
    try:
        return in_child(
            "bench.metrics_ingest:runwatch_ingest",
            database_url=f"sqlite:///{tmp}/runwatch.db",
            folder=str(folder),
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

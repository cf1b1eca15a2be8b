"""Hostile archives (beyond those in test_bad_input.py): every one gives a failed job with a
clear message, or a run with a warning for what was skipped; nothing is written outside the
store, and bombs and 100k-member archives stay within bounded time and memory."""

from __future__ import annotations

import os
import socket
import tarfile
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select

from app.config import Settings
from app.db import session_scope
from app.models import IngestJob
from app.services.sources import source_file
from tests.api.access import bearer, make_api, make_tokens
from tests.fuzz.bounded import ingest_bounded
from tests.helpers import ingest_path, table_counts
from tests.services import archives
from tests.services.archives import MB, METRICS

EMPTY = dict.fromkeys(
    ("project", "run", "segment", "event", "metric_series", "sample_chunk", "checkpoint"), 0
)
BOUND_SECONDS = 60.0
BOUND_MB = 160.0


def _failed_cleanly(engine: Engine, settings: Settings, job: object, *needles: str) -> None:
    assert job.state == "failed", job.warnings  # type: ignore[attr-defined]
    for needle in needles:
        assert needle in job.error, job.error  # type: ignore[attr-defined]
    assert "internal error" not in job.error  # type: ignore[attr-defined]
    assert source_file(settings, job.source_key).exists()  # type: ignore[attr-defined]
    assert table_counts(engine) == EMPTY


@pytest.mark.parametrize(
    ("member", "needle"),
    [
        ("../escape.txt", "points outside the archive"),
        ("run/../../escape.txt", "points outside the archive"),
        ("..\\..\\escape.txt", "points outside the archive"),
        ("/tmp/escape.txt", "absolute path"),
        ("C:\\escape.txt", "absolute path"),
        ("\\\\server\\share\\escape.txt", "absolute path"),
    ],
)
@pytest.mark.parametrize("kind", ["zip", "tar"])
def test_members_outside_the_archive_are_refused(
    kind: str, member: str, needle: str, engine: Engine, settings: Settings, tmp_path: Path
) -> None:
    path = tmp_path / f"upload.{kind}"
    if kind == "zip":
        archives.write_zip(path, [("run/metrics.jsonl", METRICS), (member, b"x")])
    else:
        members = [archives.tar_member("run/metrics.jsonl", METRICS)]
        archives.write_tar(path, [*members, archives.tar_member(member, b"x")])
    job = ingest_path(engine, settings, path)
    _failed_cleanly(engine, settings, job, f"upload.{kind}", needle)
    assert not list(tmp_path.parent.rglob("escape.txt"))


SPECIAL = {
    "hard link": {"type": tarfile.LNKTYPE, "linkname": "/etc/passwd"},
    "character device": {"type": tarfile.CHRTYPE, "devmajor": 1, "devminor": 3},
    "block device": {"type": tarfile.BLKTYPE, "devmajor": 8, "devminor": 0},
    "fifo": {"type": tarfile.FIFOTYPE},
}


@pytest.mark.parametrize("what", sorted(SPECIAL))
def test_links_devices_and_fifos_in_a_tar_are_skipped(
    what: str, engine: Engine, settings: Settings, tmp_path: Path
) -> None:
    path = archives.write_tar(
        tmp_path / "upload.tar.gz",
        [
            archives.tar_member("run/metrics.jsonl", METRICS),
            archives.tar_member("run/config.json", **SPECIAL[what]),
        ],
    )
    job = ingest_path(engine, settings, path)
    assert job.state == "succeeded", job.error
    assert any("member 'run/config.json' is a" in w and "skipped" in w for w in job.warnings)


def test_a_folder_with_a_socket_fifo_and_links_is_stored_without_them(
    engine: Engine, settings: Settings, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_bytes(METRICS)
    os.mkfifo(run / "fifo")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.json").write_text('{"secret": 1}')
    (run / "config.json").symlink_to(outside / "secret.json")
    (run / "elsewhere").symlink_to(outside)
    (run / "loop").symlink_to(run)
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(run / "socket"))
        job = ingest_path(engine, settings, run)
    assert job.state == "succeeded", job.error
    with tarfile.open(source_file(settings, job.source_key)) as stored:
        regular = sorted(m.name for m in stored if m.isfile())
    assert regular == ["metrics.jsonl"]  # nothing from outside, no socket, no fifo content
    assert any("'fifo' is a special file, skipped" in w for w in job.warnings)
    assert any("'config.json' is a link, skipped" in w for w in job.warnings)


def test_repeated_member_names_read_the_last_copy_with_a_warning(
    engine: Engine, settings: Settings, tmp_path: Path
) -> None:
    last = b'{"step": 7, "loss": 0.25}\n'
    for path in (
        archives.write_zip(
            tmp_path / "twice.zip",
            [("run/metrics.jsonl", METRICS)] * 1 + [("run/./metrics.jsonl", last)],
        ),
        archives.write_tar(
            tmp_path / "twice.tar",
            [archives.tar_member("run/metrics.jsonl", d) for d in (METRICS, last)],
        ),
    ):
        job = ingest_path(engine, settings, path, run=path.name)
        assert job.state == "succeeded", job.error
        assert job.counts["metric_rows"] == 1
        assert any("appears more than once; the last copy is read" in w for w in job.warnings)


def test_damaged_zip_members_fail_naming_the_member(
    engine: Engine, settings: Settings, tmp_path: Path
) -> None:
    path = tmp_path / "crc.zip"
    archives.write_zip(path, [("run/metrics.jsonl", METRICS * 200)])
    data = bytearray(path.read_bytes())
    data[data.index(b"metrics.jsonl") + 40] ^= 0xFF  # inside the deflate stream
    path.write_bytes(bytes(data))
    job = ingest_path(engine, settings, path)
    _failed_cleanly(engine, settings, job, "run/metrics.jsonl: could not be read")


def test_a_damaged_log_in_a_zip_is_not_an_internal_error(
    engine: Engine, settings: Settings, tmp_path: Path
) -> None:
    path = tmp_path / "megatron.zip"
    log = b" iteration 1/ 10 | consumed samples: 4 | lm loss: 2.0 |\n"
    archives.write_zip(path, [("train.log", log)])
    data = bytearray(path.read_bytes())
    data[data.index(b"train.log") + 20] ^= 0xFF
    path.write_bytes(bytes(data))
    job = ingest_path(engine, settings, path)
    _failed_cleanly(engine, settings, job, "megatron.zip")


@pytest.mark.parametrize(
    ("flags", "method", "needle"),
    [(1, None, "is encrypted; skipped"), (0, 99, "compression method 99, which cannot be read")],
)
def test_encrypted_and_unreadable_zip_members_are_skipped(
    flags: int, method: int | None, needle: str, engine: Engine, settings: Settings, tmp_path: Path
) -> None:
    path = archives.write_zip(tmp_path / "locked.zip", [("run/metrics.jsonl", METRICS)])
    archives.patch_zip_flags(path, flags=flags, method=method)
    job = ingest_path(engine, settings, path)
    _failed_cleanly(engine, settings, job, "no run found")
    assert any(needle in w for w in job.warnings), job.warnings


def test_a_corrupt_gzip_stream_fails_cleanly(
    engine: Engine, settings: Settings, tmp_path: Path
) -> None:
    path = archives.write_tar(
        tmp_path / "corrupt.tar.gz", [archives.tar_member("run/metrics.jsonl", METRICS * 50)]
    )
    data = bytearray(path.read_bytes())
    data[40:48] = b"\xff" * 8
    path.write_bytes(bytes(data))
    job = ingest_path(engine, settings, path)
    _failed_cleanly(engine, settings, job, "corrupt.tar.gz: not a valid gzip archive")


def test_past_the_source_size_limit_is_refused(
    engine: Engine, settings: Settings, tmp_path: Path
) -> None:
    settings.max_source_bytes = 4 * MB
    big = METRICS * (5 * MB // len(METRICS))
    zipped = archives.write_zip(tmp_path / "big.zip", [("run/metrics.jsonl", big)])
    job = ingest_path(engine, settings, zipped, run="zip")
    assert job.state == "failed" and "archive unpacks to more than 4194304 bytes" in job.error
    gzipped = archives.write_tar(
        tmp_path / "big.tar.gz", [archives.tar_member("run/metrics.jsonl", big)]
    )
    job = ingest_path(engine, settings, gzipped, run="tgz")
    assert job.state == "failed" and "inflates past 4194304 bytes" in job.error
    assert table_counts(engine) == EMPTY


# Bombs and huge archives, each ingested in a child process that is timed and measured.


@pytest.mark.parametrize("kind", ["zip", "tar.gz"])
def test_decompression_bombs_are_refused_in_bounded_time_and_memory(
    kind: str, tmp_path: Path
) -> None:
    make = archives.zip_bomb if kind == "zip" else archives.tar_gz_bomb
    bomb = make(tmp_path / f"bomb.{kind}", 1024 * MB)
    assert bomb.stat().st_size < 2 * MB
    job = ingest_bounded(bomb, tmp_path / "home", seconds=BOUND_SECONDS)
    assert job["state"] == "failed" and "decompression bomb" in job["error"], job
    assert job["seconds"] < BOUND_SECONDS and job["rss_growth_mb"] < BOUND_MB, job


def test_a_zip_that_understates_its_size_stops_at_the_size_it_claims(tmp_path: Path) -> None:
    liar = archives.lying_zip(tmp_path / "liar.zip", 512 * MB, claimed=1000)
    job = ingest_bounded(liar, tmp_path / "home", seconds=BOUND_SECONDS)
    assert job["state"] == "failed", job
    assert "run/metrics.jsonl: could not be read (Bad CRC-32" in job["error"], job
    assert job["seconds"] < BOUND_SECONDS and job["rss_growth_mb"] < BOUND_MB, job


@pytest.mark.parametrize("kind", ["tar.gz", "zip"])
def test_an_archive_of_100k_files(kind: str, tmp_path: Path) -> None:
    make = archives.many_member_tar if kind == "tar.gz" else archives.many_member_zip
    path = make(tmp_path / f"many.{kind}", 100_000)
    below = ingest_bounded(path, tmp_path / "below", seconds=BOUND_SECONDS)
    assert below["state"] == "succeeded", below
    assert below["counts"]["metric_rows"] == 2
    assert below["seconds"] < BOUND_SECONDS and below["rss_growth_mb"] < BOUND_MB, below
    above = ingest_bounded(
        path, tmp_path / "above", seconds=BOUND_SECONDS, max_archive_members=50_000
    )
    assert above["state"] == "failed", above
    assert "more than 50000 members" in above["error"]
    assert above["seconds"] < BOUND_SECONDS, above


# Upload names: any file name a client sends is stored under the content's digest only.


@pytest.mark.parametrize(
    "filename",
    [
        b"../../../../tmp/escape.tar.gz",
        b"/etc/cron.d/escape.zip",
        b"..\\..\\escape.zip",
        b"x" * 2000 + b".jsonl",
        b"bad\x00name.jsonl",
        b"\xff\xfe not utf-8.jsonl",
        b"",
    ],
)
def test_hostile_upload_file_names_are_stored_in_the_store_only(
    filename: bytes, engine: Engine, settings: Settings, tmp_path: Path
) -> None:
    tokens = make_tokens(engine)
    body = (
        b'--B\r\nContent-Disposition: form-data; name="file"; filename="'
        + filename
        + b'"\r\nContent-Type: application/octet-stream\r\n\r\n'
        + METRICS
        + b"\r\n--B--\r\n"
    )
    headers = {"Content-Type": "multipart/form-data; boundary=B", **bearer(tokens.write_all)}
    with TestClient(make_api(engine, settings), raise_server_exceptions=False) as client:
        response = client.post("/api/v1/ingest", content=body, headers=headers)
    assert response.status_code in (202, 422), response.text
    stored = [p for p in settings.sources_path.rglob("*") if p.is_file()]
    assert all(settings.sources_path in p.parents for p in stored)
    assert not list(Path("/tmp").glob("escape*")) and not Path("/etc/cron.d/escape.zip").exists()
    with session_scope(engine) as session:
        for job in session.scalars(select(IngestJob)):
            for text, limit in ((job.source_name, 500), (job.run_name, 300)):
                assert text and len(text) <= limit and "\x00" not in text, text[:80]
                text.encode("utf-8")

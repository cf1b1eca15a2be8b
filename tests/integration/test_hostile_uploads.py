"""A batch of hostile uploads through a served instance and a real worker: the API stays healthy
while they are processed, each job ends failed with a clear message (or succeeds, skipping what
it had to), the worker survives, and a good upload afterwards is ingested as usual."""

from __future__ import annotations

import json
import tarfile
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.procs import background, free_port, runwatch, wait_for_log, wait_http
from tests.services import archives
from tests.services.archives import MB, METRICS

pytestmark = pytest.mark.integration

LIMITS = {
    "RUNWATCH_MAX_LINE_BYTES": str(MB),
    "RUNWATCH_MAX_ARCHIVE_MEMBERS": "50000",
    "RUNWATCH_MAX_UPLOAD_BYTES": str(48 * MB),
}


def _hostile(folder: Path) -> dict[str, tuple[Path, str]]:
    """Uploads, each with what its job's error (or, for a success, a warning) must say."""
    folder.mkdir()
    deep = folder / "deep.jsonl"
    deep.write_bytes(b"[" * 100_000 + b"]" * 100_000 + b"\n")
    long = folder / "long.jsonl"
    long.write_bytes(b'{"step": 1, "loss": "' + b"x" * (3 * MB) + b'"}\n')
    noise = folder / "noise.jsonl"
    noise.write_bytes(bytes(range(256)) * 4096)
    wandb = folder / "wandb.zip"
    log = b":W&B\xe1\xbe\x00" + bytes(range(256)) * 64
    archives.write_zip(wandb, [("wandb/offline-run-20250101_000000-x/run-x.wandb", log)])
    locked = archives.patch_zip_flags(
        archives.write_zip(folder / "locked.zip", [("run/metrics.jsonl", METRICS)]), flags=1
    )
    corrupt = archives.write_tar(
        folder / "corrupt.tar.gz", [archives.tar_member("run/metrics.jsonl", METRICS * 99)]
    )
    data = bytearray(corrupt.read_bytes())
    data[40:48] = b"\xff" * 8
    corrupt.write_bytes(bytes(data))
    escape = archives.write_tar(
        folder / "escape.tar",
        [archives.tar_member("run/metrics.jsonl", METRICS), archives.tar_member("../x", b"x")],
    )
    absolute = archives.write_zip(
        folder / "absolute.zip", [("run/metrics.jsonl", METRICS), ("/etc/x", b"x")]
    )
    links = archives.write_tar(
        folder / "links.tar",
        [
            archives.tar_member("run/metrics.jsonl", METRICS),
            archives.tar_member("run/config.json", type=tarfile.SYMTYPE, linkname="/etc/passwd"),
            archives.tar_member("run/dev", type=tarfile.CHRTYPE, devmajor=1, devminor=3),
        ],
    )
    return {
        "zip bomb": (archives.zip_bomb(folder / "bomb.zip", 512 * MB), "decompression bomb"),
        "tar.gz bomb": (
            archives.tar_gz_bomb(folder / "bomb.tar.gz", 512 * MB),
            "decompression bomb",
        ),
        "100k members": (
            archives.many_member_tar(folder / "many.tar.gz", 100_000),
            "more than 50000 members",
        ),
        "escape": (escape, "points outside the archive"),
        "absolute": (absolute, "absolute path"),
        "deep json": (deep, "deep.jsonl line 1: not valid JSON"),
        "long line": (long, "long.jsonl line 1: line longer than 1048576 bytes"),
        "random bytes": (noise, "noise.jsonl line 1"),
        "w&b garbage": (wandb, "run-x.wandb"),
        "encrypted": (locked, "no run found"),
        "corrupt gzip": (corrupt, "not a valid gzip archive"),
        "links": (links, "is a link, skipped"),
    }


class _HealthWatch(threading.Thread):
    """Polls the health endpoint until stopped; keeps every answer (status or error)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.answers: list[int | str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self.stop.is_set():
                try:
                    self.answers.append(client.get(self.url).status_code)
                except httpx.HTTPError as exc:
                    self.answers.append(type(exc).__name__)
                time.sleep(0.1)


def _wait_jobs(api: httpx.Client, ids: dict[str, int], timeout: float = 240) -> dict[str, dict]:
    deadline = time.monotonic() + timeout
    done: dict[str, dict] = {}
    while time.monotonic() < deadline and len(done) < len(ids):
        for name, job_id in ids.items():
            if name not in done:
                job = api.get(f"/api/v1/jobs/{job_id}").json()
                if job["state"] in ("succeeded", "failed"):
                    done[name] = job
        time.sleep(0.3)
    assert len(done) == len(ids), f"still running: {sorted(set(ids) - set(done))}"
    return done


def test_hostile_uploads_leave_the_service_healthy(
    service_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**service_env, **LIMITS}
    made = runwatch("tokens", "create", "fuzz", "--scope", "admin", "--json", env=env)
    assert made.returncode == 0, made.stderr
    token = json.loads(made.stdout)["token"]
    uploads = _hostile(tmp_path / "uploads")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    worker_log, server_log = tmp_path / "worker.log", tmp_path / "server.log"
    with (
        background(["worker"], env, worker_log) as worker,
        background(["serve", "--port", str(port), "--no-worker"], env, server_log) as server,
    ):
        wait_for_log(worker_log, "ready", worker)
        wait_http(f"{base}/api/v1/health", server, server_log)
        watch = _HealthWatch(f"{base}/api/v1/health")
        watch.start()
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=base, headers=headers, timeout=120) as api:
            ids = {}
            for name, (path, _) in uploads.items():
                with path.open("rb") as f:
                    response = api.post(
                        "/api/v1/ingest", files={"file": (path.name, f)}, data={"project": "h"}
                    )
                assert response.status_code == 202, (name, response.text)
                ids[name] = response.json()["job_id"]

            too_big = api.post(  # past RUNWATCH_MAX_UPLOAD_BYTES: refused before it is stored
                "/api/v1/ingest",
                files={"file": ("big.jsonl", (METRICS * (49 * MB // len(METRICS) + 1)))},
            )
            assert too_big.status_code == 413, too_big.text

            jobs = _wait_jobs(api, ids)
            for name, (_, needle) in uploads.items():
                job = jobs[name]
                text = job["error"] if job["state"] == "failed" else " ".join(job["warnings"])
                assert needle in (text or ""), (name, job)
                assert "internal error" not in (text or ""), (name, job)
            assert jobs["links"]["state"] == "succeeded"
            assert all(jobs[n]["state"] == "failed" for n in ids if n != "links")

            good = tmp_path / "metrics.jsonl"
            good.write_bytes(METRICS)
            with good.open("rb") as f:
                response = api.post("/api/v1/ingest", files={"file": ("metrics.jsonl", f)})
            after = _wait_jobs(api, {"good": response.json()["job_id"]})["good"]
            assert after["state"] == "succeeded", after
        watch.stop.set()
        watch.join()
        assert worker.poll() is None, worker_log.read_text()[-3000:]
        assert server.poll() is None, server_log.read_text()[-3000:]
    assert watch.answers and set(watch.answers) == {200}, watch.answers

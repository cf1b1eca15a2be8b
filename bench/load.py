"""Load on a served Runwatch: concurrent uploads while readers hit the API and the dashboard.

    python -m bench.load --server http://127.0.0.1:8765 --token rwt_... --runs RUNS_DIR \\
        [--uploads 50] [--readers 8] [--minutes 3]

Uploads every run directory under RUNS_DIR (as .tar.gz, cycling with new run names) from
``--uploads`` threads at once, while ``--readers`` threads loop over the runs list, verdicts,
findings, a metric and a dashboard run page until the time is up and every job has finished.
Prints latency percentiles per request kind and counts errors (any 5xx or transport error).
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import random
import tarfile
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np


@dataclass
class LoadResult:
    uploads: int = 0
    jobs: dict[str, int] = field(default_factory=dict)  # final state -> count
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        kinds = {}
        for kind, values in sorted(self.latencies.items()):
            ms = np.asarray(values) * 1000
            kinds[kind] = {
                "requests": int(ms.size),
                "p50_ms": round(float(np.percentile(ms, 50)), 1),
                "p99_ms": round(float(np.percentile(ms, 99)), 1),
                "max_ms": round(float(ms.max()), 1),
            }
        return {
            "uploads": self.uploads,
            "jobs": self.jobs,
            "errors": len(self.errors),
            "first_errors": self.errors[:5],
            "seconds": round(self.seconds, 1),
            "requests": kinds,
        }


def archive(run_dir: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(run_dir, arcname=run_dir.name)
    return buffer.getvalue()


def run_load(
    server: str,
    token: str,
    run_dirs: list[Path],
    *,
    uploads: int = 50,
    readers: int = 8,
    min_seconds: float = 60.0,
    timeout: float = 600.0,
    project: str = "load",
) -> LoadResult:
    result = LoadResult()
    lock = threading.Lock()
    headers = {"Authorization": f"Bearer {token}"}
    payloads = [(d.name, archive(d)) for d in run_dirs]
    started = time.monotonic()
    done = threading.Event()

    def record(kind: str, began: float, response: httpx.Response | None, error: str = "") -> None:
        with lock:
            result.latencies[kind].append(time.monotonic() - began)
            if response is not None and response.status_code >= 500:
                result.errors.append(f"{kind}: HTTP {response.status_code} {response.text[:200]}")
            elif error:
                result.errors.append(f"{kind}: {error}")

    def call(client: httpx.Client, kind: str, method: str, url: str, **kw: Any) -> Any:
        began = time.monotonic()
        try:
            response = client.request(method, url, **kw)
        except httpx.HTTPError as exc:
            record(kind, began, None, f"{type(exc).__name__}: {exc}")
            return None
        record(kind, began, response)
        return response

    def upload(index: int) -> int | None:
        name, body = payloads[index % len(payloads)]
        with httpx.Client(base_url=server, headers=headers, timeout=120) as client:
            response = call(
                client,
                "upload",
                "POST",
                "/api/v1/ingest",
                files={"file": (f"{name}.tar.gz", body, "application/gzip")},
                data={"project": project, "run": f"{name}-{index:03d}"},
            )
        if response is None or response.status_code != 202:
            return None
        return int(response.json()["job_id"])

    def read(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(base_url=server, headers=headers, timeout=60) as client:
            for tick in itertools.count():
                if done.is_set():
                    return
                page = call(client, "runs list", "GET", "/api/v1/runs", params={"limit": 50})
                items = page.json()["items"] if page is not None and page.is_success else []
                if not items:
                    time.sleep(0.1)
                    continue
                run_id = rng.choice(items)["id"]
                call(client, "verdict", "GET", f"/api/v1/runs/{run_id}/verdict")
                call(client, "findings", "GET", f"/api/v1/runs/{run_id}/findings")
                call(client, "metric", "GET", f"/api/v1/runs/{run_id}/metrics/loss")
                if tick % 4 == 0:
                    call(client, "dashboard page", "GET", f"/runs/{run_id}")

    with ThreadPoolExecutor(max_workers=uploads + readers) as pool:
        reading = [pool.submit(read, seed) for seed in range(readers)]
        try:
            job_ids = [j for j in pool.map(upload, range(uploads)) if j is not None]
            result.uploads = len(job_ids)
            states = _wait_jobs(server, headers, job_ids, timeout)
            while time.monotonic() - started < min_seconds:
                time.sleep(0.5)
        finally:  # readers loop until told: stop them however this ends, or the pool never exits
            done.set()
        for future in reading:
            future.result()
    result.seconds = time.monotonic() - started
    for state in states.values():
        result.jobs[state] = result.jobs.get(state, 0) + 1
    return result


def _wait_jobs(
    server: str, headers: dict[str, str], job_ids: list[int], timeout: float
) -> dict[int, str]:
    deadline = time.monotonic() + timeout
    states: dict[int, str] = {}
    with httpx.Client(base_url=server, headers=headers, timeout=60) as client:
        while time.monotonic() < deadline:
            for job_id in job_ids:
                if states.get(job_id) in ("succeeded", "failed"):
                    continue
                try:
                    response = client.get(f"/api/v1/jobs/{job_id}")
                except httpx.HTTPError:
                    continue  # a busy server: ask again on the next round
                if response.is_success:
                    states[job_id] = response.json()["state"]
            if all(states.get(j) in ("succeeded", "failed") for j in job_ids):
                break
            time.sleep(1.0)
    return states


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--runs", type=Path, required=True, help="a folder of run directories")
    parser.add_argument("--uploads", type=int, default=50)
    parser.add_argument("--readers", type=int, default=8)
    parser.add_argument("--minutes", type=float, default=3.0)
    args = parser.parse_args()
    run_dirs = sorted(p for p in args.runs.iterdir() if p.is_dir())
    result = run_load(
        args.server,
        args.token,
        run_dirs,
        uploads=args.uploads,
        readers=args.readers,
        min_seconds=args.minutes * 60,
    )
    print(json.dumps(result.summary(), indent=2))


if __name__ == "__main__":
    main()

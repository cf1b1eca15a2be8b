"""Telemetry pulled through the real beat and worker: a dcgm-exporter-style endpoint and
Runwatch's own agent on loopback are scraped on schedule; a dead node is recorded as failing
and leaves a gap, never zeros."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.procs import background, free_port, wait_for_log, wait_http

pytestmark = pytest.mark.integration

LABELS = 'modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-1"'
CAPTURE = f"""# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{{gpu="0",UUID="GPU-0a",device="nvidia0",{LABELS},pod="trainer-0"}} 612.5
DCGM_FI_DEV_POWER_USAGE{{gpu="1",UUID="GPU-1b",device="nvidia1",{LABELS}}} 71.25
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-0a",device="nvidia0",{LABELS},pod="trainer-0"}} 97
DCGM_FI_DEV_GPU_UTIL{{gpu="1",UUID="GPU-1b",device="nvidia1",{LABELS}}} 0
# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="GPU-0a",device="nvidia0",{LABELS},pod="trainer-0"}} 64
DCGM_FI_DEV_GPU_TEMP{{gpu="1",UUID="GPU-1b",device="nvidia1",{LABELS}}} 9223372036854775794
"""


@pytest.fixture
def exporter() -> Iterator[tuple[str, list[float]]]:
    hits: list[float] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(time.time())
            body = CAPTURE.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics", hits
    finally:
        server.shutdown()
        server.server_close()


def test_scrapes_on_schedule_with_failures_recorded(
    service_env: dict[str, str],
    api_token: str,
    exporter: tuple[str, list[float]],
    tmp_path: Path,
) -> None:
    exporter_url, hits = exporter
    agent_port, api_port = free_port(), free_port()
    base = f"http://127.0.0.1:{api_port}"
    with (
        background(["worker", "--beat"], service_env, tmp_path / "w.log") as worker,
        background(
            ["agent", "--port", str(agent_port), "--host", "127.0.0.1"],
            service_env,
            tmp_path / "a.log",
        ) as agent,
        background(
            ["serve", "--port", str(api_port), "--no-worker"], service_env, tmp_path / "s.log"
        ) as api,
    ):
        wait_for_log(tmp_path / "w.log", "ready", worker)
        wait_http(f"http://127.0.0.1:{agent_port}/healthz", agent, tmp_path / "a.log")
        wait_http(f"{base}/api/v1/health", api, tmp_path / "s.log")
        client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {api_token}"})
        ids = {}
        for name, kind, url in [
            ("gpu-node-1", "dcgm", exporter_url),
            ("agent-node", "agent", f"http://127.0.0.1:{agent_port}/metrics"),
            ("dead-node", "dcgm", f"http://127.0.0.1:{free_port()}/metrics"),
        ]:
            answer = client.post(
                "/api/v1/nodes",
                json={"name": name, "kind": kind, "url": url, "interval_s": 1, "timeout_s": 1},
            )
            assert answer.status_code == 201, answer.text
            ids[name] = answer.json()["id"]
        duplicate = client.post("/api/v1/nodes", json={"name": "gpu-node-1", "url": exporter_url})
        assert duplicate.status_code == 409

        nodes = _wait(
            lambda: _nodes_when(
                client,
                lambda n: (
                    len(hits) >= 3
                    and n["dead-node"]["failures"] >= 2
                    and n["agent-node"]["last_success_at"] is not None
                ),
            ),
            timeout=60,
        )
        assert nodes["gpu-node-1"]["series"] == 6 and nodes["gpu-node-1"]["failures"] == 0
        assert nodes["agent-node"]["series"] == 0  # no GPU here: the agent serves no GPU lines
        assert nodes["agent-node"]["failures"] == 0  # it answers, with a note, not an error
        assert "no GPU samples" in nodes["agent-node"]["last_error"]
        assert nodes["dead-node"]["series"] == 0 and "Connect" in nodes["dead-node"]["last_error"]
        first, last = min(hits), max(hits)
        assert (len(hits) - 1) / max(last - first, 1e-9) < 2.5  # about once a second, not more

        power = client.get(
            f"/api/v1/nodes/{ids['gpu-node-1']}/telemetry",
            params={"metric": "power", "from": time.time() - 600},
        ).json()
        by_gpu = {s["gpu"]: s for s in power["series"]}
        assert set(by_gpu) == {"GPU-0a", "GPU-1b"}
        assert set(by_gpu["GPU-0a"]["values"]) == {612.5} and set(by_gpu["GPU-1b"]["values"]) == {
            71.25
        }
        assert by_gpu["GPU-0a"]["labels"]["pod"] == "trainer-0"
        assert by_gpu["GPU-0a"]["num_points"] >= 2
        temp = client.get(
            f"/api/v1/nodes/{ids['gpu-node-1']}/telemetry", params={"metric": "temp"}
        ).json()
        blank = {s["gpu"]: s["values"] for s in temp["series"]}
        assert set(blank["GPU-0a"]) == {64.0} and set(blank["GPU-1b"]) == {None}  # never 0

        dead = f"/api/v1/nodes/{ids['dead-node']}"
        off = client.patch(dead, json={"enabled": False})
        assert off.status_code == 200 and off.json()["enabled"] is False
        assert client.patch(dead, json={"kind": "ftp"}).status_code == 422
        assert httpx.delete(base + dead).status_code == 401  # writes need a token
        assert client.delete(dead).status_code == 204
        assert client.get(dead).status_code == 404


def _nodes_when(client: httpx.Client, ready: Any) -> dict[str, Any] | None:
    nodes = {n["name"]: n for n in client.get("/api/v1/nodes").json()}
    return nodes if len(nodes) == 3 and ready(nodes) else None


def _wait(check: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise TimeoutError("telemetry did not arrive")

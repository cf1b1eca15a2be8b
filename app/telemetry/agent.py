"""Runwatch node agent: GPU telemetry in dcgm-exporter's format, for nodes without DCGM.

Running it on a node
--------------------
Start one agent per GPU node (e.g. as a systemd service) with ``runwatch agent``; it listens on
0.0.0.0:9400, dcgm-exporter's port (``--host``, ``--port``). ``--hostname`` sets the ``Hostname``
label (default: the node's hostname); ``--source`` picks where readings come from (``auto``,
``nvml``, ``nvidia-smi`` or ``none``). Point Prometheus, or Runwatch's node scraper, at
``http://<node>:9400/metrics`` exactly as at dcgm-exporter. Ctrl-C or SIGTERM stops it.

Where readings come from: NVML (the ``nvidia-ml-py`` package) when the driver library loads;
otherwise ``nvidia-smi --query-gpu=... --format=csv,noheader,nounits`` (killed after 4 s).
Each scrape reads fresh values; scrapes within 1 s share one read, and a read that takes
longer than 5 s is given up (it counts as a scrape error).

What it serves
--------------
``GET /metrics``: Prometheus text with dcgm-exporter's classic field names and units, one line
per GPU: ``DCGM_FI_DEV_GPU_UTIL`` and ``DCGM_FI_DEV_MEM_COPY_UTIL`` (%),
``DCGM_FI_DEV_FB_USED``/``FB_FREE``/``FB_TOTAL`` (MiB), ``DCGM_FI_DEV_POWER_USAGE`` (W),
``DCGM_FI_DEV_GPU_TEMP`` (°C), ``DCGM_FI_DEV_SM_CLOCK``/``MEM_CLOCK`` (MHz),
``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (mJ counter, NVML only) and ``DCGM_FI_DEV_XID_ERRORS``
(the last XID seen since the agent started, 0 for none; NVML only). Labels: ``gpu``, ``UUID``,
``pci_bus_id``, ``device`` (``nvidia<N>``), ``modelName``, ``Hostname``,
``DCGM_FI_DRIVER_VERSION``, and ``hpc_job`` when the agent runs with ``SLURM_JOB_ID`` set. A
reading the GPU does not offer (``[N/A]``, NVML "Not Supported") is left out, never sent as 0.
The agent's own metrics: ``runwatch_agent_up``, ``runwatch_agent_gpus``,
``runwatch_agent_source_info{source=...}`` and ``runwatch_agent_scrape_errors_total`` (failed
reads of the node, or of one GPU).

``GET /healthz``: ``{"ok": true, "gpus": 8, "source": "nvml", "reason": null}``; ``ok`` is false,
and ``reason`` says why, when the latest read failed.

Without a GPU
-------------
When neither NVML nor nvidia-smi finds a GPU, the agent still starts and logs one line, e.g.
``runwatch agent: no NVIDIA GPU found: NVML: NVML Shared Library Not Found; nvidia-smi: not
found on PATH — serving no GPU metrics``. ``/metrics`` then holds only ``runwatch_agent_up 1``,
``runwatch_agent_gpus 0`` and ``runwatch_agent_source_info{source="none",reason="..."} 1`` (no
``DCGM_FI_*`` line, so nothing reads as an idle GPU), and ``/healthz`` answers
``{"ok": true, "gpus": 0, "source": "none", "reason": "..."}``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from app.telemetry.gpu_sources import GpuReading, GpuSource, open_source

log = logging.getLogger(__name__)

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"

# (metric name, GpuReading attribute, Prometheus type, help text)
FIELDS: tuple[tuple[str, str, str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "sm_clock_mhz", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "mem_clock_mhz", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_GPU_TEMP", "temp_c", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "power_w", "gauge", "Power draw (in W)."),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "energy_mj",
        "counter",
        "Total energy consumption since the driver was loaded (in mJ).",
    ),
    ("DCGM_FI_DEV_GPU_UTIL", "gpu_util", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "mem_util", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_FB_FREE", "fb_free_mib", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "fb_used_mib", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_TOTAL", "fb_total_mib", "gauge", "Framebuffer memory total (in MiB)."),
    ("DCGM_FI_DEV_XID_ERRORS", "xid", "gauge", "Value of the last XID error encountered."),
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Iterable[tuple[str, str | None]]) -> str:
    body = ",".join(f'{key}="{_escape(value)}"' for key, value in pairs if value is not None)
    return "{" + body + "}" if body else ""


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _family(name: str, kind: str, help_text: str, samples: list[str]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples] if samples else []


def render_metrics(
    readings: list[GpuReading],
    *,
    source: str,
    reason: str | None,
    gpus: int,
    scrape_errors: int | None,
    hostname: str,
    job: str | None = None,
) -> str:
    """The /metrics body: DCGM fields per GPU (only readings that exist), then the agent's own."""
    lines: list[str] = []
    for name, attr, kind, help_text in FIELDS:
        samples = []
        for gpu in readings:
            value = getattr(gpu, attr)
            if value is None or gpu.error is not None:
                continue
            labels = [
                ("gpu", str(gpu.index)),
                ("UUID", gpu.uuid),
                ("pci_bus_id", gpu.pci_bus_id),
                ("device", f"nvidia{gpu.index}"),
                ("modelName", gpu.name),
                ("Hostname", hostname),
                ("DCGM_FI_DRIVER_VERSION", gpu.driver_version),
                ("hpc_job", job),
            ]
            if attr == "xid":
                labels.append(("err_code", str(value)))
            samples.append(f"{name}{_labels(labels)} {_number(value)}")
        lines += _family(name, kind, help_text, samples)
    info = _labels([("source", source), ("reason", reason)])
    lines += [
        "# HELP runwatch_agent_up The Runwatch node agent is serving.",
        "# TYPE runwatch_agent_up gauge",
        "runwatch_agent_up 1",
        "# HELP runwatch_agent_gpus GPUs the agent reads on this node.",
        "# TYPE runwatch_agent_gpus gauge",
        f"runwatch_agent_gpus {gpus}",
        "# HELP runwatch_agent_source_info Where GPU readings come from (nvml, nvidia-smi, none).",
        "# TYPE runwatch_agent_source_info gauge",
        f"runwatch_agent_source_info{info} 1",
    ]
    if scrape_errors is not None:
        lines += _family(
            "runwatch_agent_scrape_errors_total",
            "counter",
            "GPU reads that failed (whole node or one GPU).",
            [f"runwatch_agent_scrape_errors_total {scrape_errors}"],
        )
    return "\n".join(lines) + "\n"


class AgentState:
    """The agent's source and counters; reads are shared for ``cache_s`` and bounded in time."""

    def __init__(
        self,
        source: GpuSource | None,
        reason: str | None,
        *,
        hostname: str,
        job: str | None = None,
        cache_s: float = 1.0,
        read_timeout_s: float = 5.0,
    ) -> None:
        self.source, self.reason = source, reason
        self.hostname, self.job = hostname, job
        self.cache_s, self.read_timeout_s = cache_s, read_timeout_s
        self.scrape_errors = 0
        self.gpus = 0
        self._readings: list[GpuReading] = []
        self._error: str | None = None
        self._read_at = float("-inf")
        self._lock = threading.Lock()
        self._pending: Future[list[GpuReading]] | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="runwatch-gpu-read")
        if source is not None:
            self.gpus = len(self.snapshot()[0])

    def snapshot(self) -> tuple[list[GpuReading], str | None]:
        """The latest readings and why the latest read failed (None when it did not)."""
        if self.source is None:
            return [], None
        with self._lock:
            if time.monotonic() - self._read_at >= self.cache_s:
                self._readings, self._error = self._read(self.source)
                self._read_at = time.monotonic()
            return self._readings, self._error

    def _read(self, source: GpuSource) -> tuple[list[GpuReading], str | None]:
        if self._pending is not None and not self._pending.done():
            self.scrape_errors += 1
            return [], f"{source.name}: the previous read has not returned yet"
        self._pending = self._pool.submit(source.read)
        try:
            readings = self._pending.result(timeout=self.read_timeout_s)
        except FutureTimeout:
            error = f"{source.name}: read timed out after {self.read_timeout_s:g} s"
        except Exception as exc:
            error = f"{source.name}: {exc}"
        else:
            failed = [gpu.error for gpu in readings if gpu.error is not None]
            self.scrape_errors += len(failed)
            self.gpus = len(readings)
            return readings, "; ".join(failed) or None
        self.scrape_errors += 1
        log.warning("runwatch agent: %s", error)
        return [], error

    def metrics_text(self) -> str:
        readings, _ = self.snapshot()
        return render_metrics(
            readings,
            source=self.source.name if self.source is not None else "none",
            reason=self.reason if self.source is None else None,
            gpus=self.gpus,
            scrape_errors=self.scrape_errors if self.source is not None else None,
            hostname=self.hostname,
            job=self.job,
        )

    def health(self) -> dict[str, Any]:
        _, error = self.snapshot()
        source = self.source.name if self.source is not None else "none"
        reason = self.reason if self.source is None else error
        return {"ok": error is None, "gpus": self.gpus, "source": source, "reason": reason}

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self.source is not None:
            self.source.close()


class AgentServer(ThreadingHTTPServer):
    state: AgentState


class _Handler(BaseHTTPRequestHandler):
    server: AgentServer

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, PROMETHEUS_TEXT, self.server.state.metrics_text())
        elif path == "/healthz":
            self._send(200, "application/json", json.dumps(self.server.state.health()))
        else:
            self._send(404, "text/plain; charset=utf-8", "not found: try /metrics or /healthz\n")

    def _send(self, status: int, content_type: str, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)


def make_server(
    host: str,
    port: int,
    *,
    hostname: str | None = None,
    source: str | GpuSource = "auto",
    cache_s: float = 1.0,
    read_timeout_s: float = 5.0,
    nvml: Any = None,
) -> tuple[ThreadingHTTPServer, AgentState]:
    """A bound, not yet serving, agent. ``source`` is a name or an opened source, and ``nvml``
    an NVML binding to use instead of ``pynvml`` (both for tests)."""
    if isinstance(source, str):
        opened, reason = open_source(source, nvml=nvml)
    else:
        opened, reason = source, None
    state = AgentState(
        opened,
        reason,
        hostname=hostname or socket.gethostname(),
        job=os.environ.get("SLURM_JOB_ID") or None,
        cache_s=cache_s,
        read_timeout_s=read_timeout_s,
    )
    if opened is None and source != "none":
        log.warning("runwatch agent: no NVIDIA GPU found: %s — serving no GPU metrics", reason)
    elif opened is None:
        log.warning("runwatch agent: %s — serving no GPU metrics", reason)
    else:
        log.info("runwatch agent: %d GPU(s) read through %s", state.gpus, opened.name)
    try:
        server = AgentServer((host, port), _Handler)
    except BaseException:
        state.close()
        raise
    server.state = state
    return server, state


def _stop_on_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def run_agent(
    host: str = "0.0.0.0", port: int = 9400, *, hostname: str | None = None, source: str = "auto"
) -> None:
    """Serve /metrics and /healthz until Ctrl-C or SIGTERM."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(message)s")
    server, state = make_server(host, port, hostname=hostname, source=source)
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm) if in_main else None
    bound_host, bound_port = server.server_address[:2]
    log.info("runwatch agent: serving http://%s:%s/metrics and /healthz", bound_host, bound_port)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        log.info("runwatch agent: stopped")
    finally:
        server.server_close()
        state.close()
        if in_main:
            signal.signal(signal.SIGTERM, previous)

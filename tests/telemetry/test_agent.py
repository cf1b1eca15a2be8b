"""The node agent over real HTTP: no GPU, a fake nvidia-smi on PATH, and a stand-in NVML binding."""

from __future__ import annotations

import json
import logging
import os
import queue
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from app.telemetry.agent import AgentState, make_server
from app.telemetry.gpu_sources import MIB, GpuSource, NvmlSource, SmiSource, open_source

ROOT = Path(__file__).resolve().parents[2]
NO_GPU_REASON = "NVML: NVML Shared Library Not Found; nvidia-smi: not found on PATH"


# --- helpers --------------------------------------------------------------------------------


@contextmanager
def serving(**kwargs: Any) -> Iterator[tuple[str, AgentState]]:
    server, state = make_server("127.0.0.1", 0, hostname="node-a", **kwargs)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()
        state.close()


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)')


def parse_prometheus(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Samples by metric name; fails on anything that is not valid Prometheus text format."""
    assert text.endswith("\n")
    helped: set[str] = set()
    typed: dict[str, str] = {}
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split(" ", 3)[2]
            assert name not in helped, f"second HELP for {name}"
            helped.add(name)
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("gauge", "counter") and name not in typed and name not in samples
            typed[name] = kind
        else:
            match = SAMPLE.match(line)
            assert match, f"not a sample line: {line!r}"
            name, body, value = match.groups()
            assert name in typed and name in helped, f"{name} has no HELP/TYPE before it"
            labels = dict(LABEL.findall(body or ""))
            assert "".join(m.group(0) for m in LABEL.finditer(body or "")) == (body or "")
            assert all(labels != seen for seen, _ in samples.get(name, [])), f"repeated {line}"
            samples.setdefault(name, []).append((labels, float(value)))
    return samples


def by_gpu(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> dict[str, float]:
    return {labels["gpu"]: value for labels, value in samples.get(name, [])}


# --- (1) no GPU -----------------------------------------------------------------------------

NO_GPU_METRICS = f"""\
# HELP runwatch_agent_up The Runwatch node agent is serving.
# TYPE runwatch_agent_up gauge
runwatch_agent_up 1
# HELP runwatch_agent_gpus GPUs the agent reads on this node.
# TYPE runwatch_agent_gpus gauge
runwatch_agent_gpus 0
# HELP runwatch_agent_source_info Where GPU readings come from (nvml, nvidia-smi, none).
# TYPE runwatch_agent_source_info gauge
runwatch_agent_source_info{{source="none",reason="{NO_GPU_REASON}"}} 1
"""


class NoDriverNvml:
    """What ``pynvml`` does on a node without the NVIDIA driver library."""

    NVMLError = pynvml.NVMLError

    def nvmlInit(self) -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)


def test_without_a_gpu_serves_only_the_agents_own_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi anywhere
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    caplog.set_level(logging.INFO, logger="app.telemetry")
    with serving(nvml=NoDriverNvml()) as (url, _):
        status, content_type, metrics = get(url + "/metrics")
        health = get(url + "/healthz")
        missing = get(url + "/nope")
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    assert metrics == NO_GPU_METRICS
    assert "DCGM_FI" not in metrics
    parse_prometheus(metrics)
    assert health[:2] == (200, "application/json")
    assert json.loads(health[2]) == {
        "ok": True,
        "gpus": 0,
        "source": "none",
        "reason": NO_GPU_REASON,
    }
    assert missing[0] == 404
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        f"runwatch agent: no NVIDIA GPU found: {NO_GPU_REASON} — serving no GPU metrics"
    ]


def test_the_real_pynvml_never_serves_dcgm_lines_without_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with serving() as (url, state):
        samples = parse_prometheus(get(url + "/metrics")[2])
    gpus = samples["runwatch_agent_gpus"][0][1]
    assert gpus == state.gpus
    assert any(name.startswith("DCGM_FI") for name in samples) == (gpus > 0)


def test_source_none_and_unknown_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    with serving(source="none") as (url, _):
        health = json.loads(get(url + "/healthz")[2])
    assert health == {
        "ok": True,
        "gpus": 0,
        "source": "none",
        "reason": "GPU readings turned off (source none)",
    }
    with pytest.raises(ValueError, match="unknown GPU source 'dcgm'"):
        open_source("dcgm")


def test_run_agent_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = (
        f"from app.telemetry.agent import run_agent; run_agent('127.0.0.1', {port}, source='none')"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(
        [sys.executable, "-c", code], stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path
    ) as proc:
        assert proc.stderr is not None
        lines = [proc.stderr.readline(), proc.stderr.readline()]
        assert lines[1].startswith(f"runwatch agent: serving http://127.0.0.1:{port}/metrics")
        assert json.loads(get(f"http://127.0.0.1:{port}/healthz")[2])["source"] == "none"
        proc.send_signal(2)  # SIGINT, as Ctrl-C
        rest = proc.stderr.read()
        assert proc.wait(timeout=10) == 0
    assert "runwatch agent: stopped" in rest and "Traceback" not in rest


# --- (2) nvidia-smi -------------------------------------------------------------------------

SMI_GPUS = [
    {
        "index": "0",
        "uuid": "GPU-c4529c8d-69c4-b61d-e0bc-7b2460096005",
        "name": "NVIDIA H100 80GB HBM3",
        "pci.bus_id": "00000000:53:00.0",
        "driver_version": "580.105.08",
        "utilization.gpu": "100",
        "utilization.memory": "11",
        "memory.used": "19818",
        "memory.free": "61741",
        "memory.total": "81559",
        "power.draw": "631.95",
        "temperature.gpu": "59",
        "clocks.sm": "1980",
        "clocks.mem": "2619",
    },
    {
        "index": "1",
        "uuid": "GPU-bc5610b9-79c8-fedd-8899-07539c7f868a",
        "name": "NVIDIA H100 80GB HBM3",
        "pci.bus_id": "00000000:64:00.0",
        "driver_version": "580.105.08",
        "utilization.gpu": "0",
        "utilization.memory": "[N/A]",
        "memory.used": "0",
        "memory.free": "81559",
        "memory.total": "81559",
        "power.draw": "[Not Supported]",
        "temperature.gpu": "41",
        "clocks.sm": "345",
        "clocks.mem": "2619",
    },
]

# Answers only the query form the agent uses, with the requested columns in the requested order;
# FAKE_SMI_MODE=fail/hang makes it fail like a node whose driver is gone, or hang.
FAKE_SMI = """\
#!{python}
import json, os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "calls.log"), "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
mode = os.environ.get("FAKE_SMI_MODE", "ok")
if mode == "fail":
    print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    sys.exit(9)
if mode == "hang":
    time.sleep(30)
query = [a for a in sys.argv[1:] if a.startswith("--query-gpu=")]
if len(query) != 1 or "--format=csv,noheader,nounits" not in sys.argv[1:]:
    print("unexpected arguments", sys.argv[1:])
    sys.exit(2)
columns = query[0].split("=", 1)[1].split(",")
with open(os.path.join(here, "gpus.json")) as f:
    gpus = json.load(f)
for column in columns:
    if column not in gpus[0]:
        print('Field "%s" is not a valid field to query.' % column)
        sys.exit(2)
for gpu in gpus:
    print(", ".join(gpu[column] for column in columns))
"""


@pytest.fixture
def fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake ``nvidia-smi`` first on PATH; returns its folder (gpus.json, calls.log)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "nvidia-smi"
    script.write_text(FAKE_SMI.format(python=sys.executable))
    script.chmod(0o755)
    (folder / "gpus.json").write_text(json.dumps(SMI_GPUS))
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("FAKE_SMI_MODE", raising=False)
    return folder


def test_nvidia_smi_readings_in_dcgm_units_and_labels(
    fake_smi: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    with serving(source="nvidia-smi", cache_s=0) as (url, _):
        metrics = get(url + "/metrics")[2]
        health = json.loads(get(url + "/healthz")[2])
    samples = parse_prometheus(metrics)
    assert samples["DCGM_FI_DEV_POWER_USAGE"] == [
        (
            {
                "gpu": "0",
                "UUID": "GPU-c4529c8d-69c4-b61d-e0bc-7b2460096005",
                "pci_bus_id": "00000000:53:00.0",
                "device": "nvidia0",
                "modelName": "NVIDIA H100 80GB HBM3",
                "Hostname": "node-a",
                "DCGM_FI_DRIVER_VERSION": "580.105.08",
                "hpc_job": "4242",
            },
            631.95,
        )
    ]  # GPU 1's "[Not Supported]" is left out, not sent as 0
    assert by_gpu(samples, "DCGM_FI_DEV_GPU_UTIL") == {"0": 100, "1": 0}
    assert by_gpu(samples, "DCGM_FI_DEV_MEM_COPY_UTIL") == {"0": 11}  # GPU 1 said [N/A]
    assert by_gpu(samples, "DCGM_FI_DEV_FB_USED") == {"0": 19818, "1": 0}  # MiB
    assert by_gpu(samples, "DCGM_FI_DEV_FB_FREE") == {"0": 61741, "1": 81559}
    assert by_gpu(samples, "DCGM_FI_DEV_GPU_TEMP") == {"0": 59, "1": 41}
    assert by_gpu(samples, "DCGM_FI_DEV_SM_CLOCK") == {"0": 1980, "1": 345}
    assert by_gpu(samples, "DCGM_FI_DEV_MEM_CLOCK") == {"0": 2619, "1": 2619}
    assert [labels["device"] for labels, _ in samples["DCGM_FI_DEV_GPU_TEMP"]] == [
        "nvidia0",
        "nvidia1",
    ]
    # nvidia-smi offers neither an energy counter nor XIDs: those families are absent.
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" not in metrics
    assert "DCGM_FI_DEV_XID_ERRORS" not in metrics
    assert 'DCGM_FI_DEV_POWER_USAGE{gpu="0",' in metrics and " 631.95\n" in metrics
    assert "# TYPE DCGM_FI_DEV_FB_USED gauge\n" in metrics
    assert samples["runwatch_agent_gpus"] == [({}, 2)]
    assert samples["runwatch_agent_source_info"] == [({"source": "nvidia-smi"}, 1)]
    assert samples["runwatch_agent_scrape_errors_total"] == [({}, 0)]
    assert health == {"ok": True, "gpus": 2, "source": "nvidia-smi", "reason": None}
    query = (fake_smi / "calls.log").read_text().splitlines()[-1]
    assert query.startswith("--query-gpu=index,uuid,name,")


def test_each_scrape_reads_fresh_values(fake_smi: Path) -> None:
    with serving(source="nvidia-smi", cache_s=0) as (url, _):
        first = parse_prometheus(get(url + "/metrics")[2])
        gpus = json.loads((fake_smi / "gpus.json").read_text())
        gpus[0]["power.draw"] = "70.5"
        (fake_smi / "gpus.json").write_text(json.dumps(gpus))
        later = parse_prometheus(get(url + "/metrics")[2])
    assert by_gpu(first, "DCGM_FI_DEV_POWER_USAGE") == {"0": 631.95}
    assert by_gpu(later, "DCGM_FI_DEV_POWER_USAGE") == {"0": 70.5}


def test_concurrent_scrapes_share_one_read(fake_smi: Path) -> None:
    def calls() -> int:
        return len((fake_smi / "calls.log").read_text().splitlines())

    with serving(source="nvidia-smi", cache_s=1.0) as (url, _):
        time.sleep(1.0)  # the start-up read has expired
        before = calls()
        bodies: list[str] = []
        scrapes = [
            threading.Thread(target=lambda: bodies.append(get(url + "/metrics")[2]))
            for _ in range(8)
        ]
        for thread in scrapes:
            thread.start()
        for thread in scrapes:
            thread.join()
    assert calls() == before + 1
    assert len(bodies) == 8 and len(set(bodies)) == 1 and "DCGM_FI_DEV_GPU_UTIL" in bodies[0]


def test_auto_falls_back_to_nvidia_smi_when_nvml_fails(
    fake_smi: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="app.telemetry")
    source, reason = open_source("auto", nvml=NoDriverNvml())
    assert isinstance(source, SmiSource) and reason is None
    assert "NVML: NVML Shared Library Not Found; reading GPUs with nvidia-smi" in caplog.text


# --- (4) a failing nvidia-smi ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("fail", "nvidia-smi: exit status 9: NVIDIA-SMI has failed because it couldn't"),
        ("hang", "nvidia-smi: timed out after 0.5 s"),
    ],
)
def test_a_failing_nvidia_smi_counts_a_scrape_error_and_serves_no_gpu_lines(
    fake_smi: Path, monkeypatch: pytest.MonkeyPatch, mode: str, reason: str
) -> None:
    source = SmiSource.open(timeout_s=0.5)
    with serving(source=source, cache_s=0) as (url, _):
        monkeypatch.setenv("FAKE_SMI_MODE", mode)
        started = time.monotonic()
        metrics = get(url + "/metrics")[2]
        took = time.monotonic() - started
        health = json.loads(get(url + "/healthz")[2])
    assert took < 5
    assert metrics == (
        "# HELP runwatch_agent_up The Runwatch node agent is serving.\n"
        "# TYPE runwatch_agent_up gauge\n"
        "runwatch_agent_up 1\n"
        "# HELP runwatch_agent_gpus GPUs the agent reads on this node.\n"
        "# TYPE runwatch_agent_gpus gauge\n"
        "runwatch_agent_gpus 2\n"
        "# HELP runwatch_agent_source_info Where GPU readings come from (nvml, nvidia-smi, none).\n"
        "# TYPE runwatch_agent_source_info gauge\n"
        'runwatch_agent_source_info{source="nvidia-smi"} 1\n'
        "# HELP runwatch_agent_scrape_errors_total GPU reads that failed (whole node or one GPU).\n"
        "# TYPE runwatch_agent_scrape_errors_total counter\n"
        "runwatch_agent_scrape_errors_total 1\n"
    )
    assert health["ok"] is False and health["gpus"] == 2 and health["source"] == "nvidia-smi"
    assert health["reason"].startswith(reason)


# --- (3) NVML -------------------------------------------------------------------------------


class FakeNvml:
    """A stand-in NVML binding with ``pynvml``'s API: two H100s, GPU 1 without power/energy."""

    NVMLError = pynvml.NVMLError
    NVML_ERROR_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_NO_PERMISSION = pynvml.NVML_ERROR_NO_PERMISSION
    NVML_ERROR_TIMEOUT = pynvml.NVML_ERROR_TIMEOUT
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    nvmlMemory_v2 = pynvml.nvmlMemory_v2
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_CLOCK_MEM = pynvml.NVML_CLOCK_MEM
    nvmlEventTypeXidCriticalError = pynvml.nvmlEventTypeXidCriticalError

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.xids: queue.Queue[tuple[int, int]] = queue.Queue()
        self.lost: set[int] = set()

    def _unsupported(self) -> pynvml.NVMLError:
        return pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlInit(self) -> None:
        self.calls.append("init")

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.105.08"

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetIndex(self, handle: int) -> int:
        return handle

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return ["GPU-c4529c8d-69c4-b61d-e0bc-7b2460096005", "GPU-bc5610b9-0000"][handle]

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return b"NVIDIA H100 80GB HBM3"  # older pynvml releases answer bytes

    def nvmlDeviceGetPciInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(busId=[b"00000000:53:00.0", b"00000000:64:00.0"][handle])

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        if handle in self.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return SimpleNamespace(gpu=[88, 0][handle], memory=[35, 0][handle])

    def nvmlDeviceGetMemoryInfo(self, handle: int, version: int | None = None) -> SimpleNamespace:
        if handle == 1 and version is not None:  # a driver without the v2 call
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        total, reserved = 81559 * MIB, 615 * MIB
        used = [19818 * MIB + 4096, 0][handle]
        if version is None:  # v1 counts the driver's reservation as used
            return SimpleNamespace(total=total, used=used + reserved, free=total - used - reserved)
        assert version == pynvml.nvmlMemory_v2
        return SimpleNamespace(total=total, used=used, free=total - used - reserved)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        if handle == 1:
            raise self._unsupported()
        return 631_950  # mW

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return [59, 41][handle]

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:
        return {pynvml.NVML_CLOCK_SM: [1980, 345], pynvml.NVML_CLOCK_MEM: [2619, 2619]}[clock][
            handle
        ]

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        if handle == 1:
            raise self._unsupported()
        return 455_497_156  # mJ

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, handle: int, events: int, event_set: str) -> None:
        if handle == 1:
            raise self._unsupported()

    def nvmlEventSetWait(self, event_set: str, timeout_ms: int) -> SimpleNamespace:
        try:
            index, xid = self.xids.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT) from None
        return SimpleNamespace(
            device=index, eventType=self.nvmlEventTypeXidCriticalError, eventData=xid
        )

    def nvmlEventSetFree(self, event_set: str) -> None:
        self.calls.append("free")


def nvml_source(nvml: FakeNvml) -> GpuSource:
    source, reason = open_source("nvml", nvml=nvml)
    assert source is not None and reason is None
    return source


def test_nvml_readings_units_and_not_supported_left_out() -> None:
    nvml = FakeNvml()
    source = nvml_source(nvml)
    assert isinstance(source, NvmlSource)
    with serving(source=source, cache_s=0) as (url, _):
        samples = parse_prometheus(get(url + "/metrics")[2])
        health = json.loads(get(url + "/healthz")[2])
    assert by_gpu(samples, "DCGM_FI_DEV_POWER_USAGE") == {"0": 631.95}  # mW -> W; GPU 1 absent
    assert by_gpu(samples, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") == {"0": 455_497_156}
    # bytes -> MiB; GPU 0 through memory info v2 (reservation not "used"), GPU 1 through v1
    assert by_gpu(samples, "DCGM_FI_DEV_FB_USED") == {"0": 19818, "1": 615}
    assert by_gpu(samples, "DCGM_FI_DEV_FB_FREE") == {"0": 81559 - 19819 - 615, "1": 81559 - 615}
    assert by_gpu(samples, "DCGM_FI_DEV_FB_TOTAL") == {"0": 81559, "1": 81559}
    assert by_gpu(samples, "DCGM_FI_DEV_GPU_UTIL") == {"0": 88, "1": 0}
    assert by_gpu(samples, "DCGM_FI_DEV_MEM_COPY_UTIL") == {"0": 35, "1": 0}
    assert by_gpu(samples, "DCGM_FI_DEV_GPU_TEMP") == {"0": 59, "1": 41}
    assert by_gpu(samples, "DCGM_FI_DEV_SM_CLOCK") == {"0": 1980, "1": 345}
    labels = samples["DCGM_FI_DEV_GPU_TEMP"][1][0]
    assert labels == {
        "gpu": "1",
        "UUID": "GPU-bc5610b9-0000",
        "pci_bus_id": "00000000:64:00.0",
        "device": "nvidia1",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": "node-a",
        "DCGM_FI_DRIVER_VERSION": "580.105.08",
    }
    assert samples["runwatch_agent_source_info"] == [({"source": "nvml"}, 1)]
    assert health == {"ok": True, "gpus": 2, "source": "nvml", "reason": None}
    assert nvml.calls[0] == "init" and nvml.calls[-2:] == ["free", "shutdown"]


def test_nvml_xid_errors_reach_the_metric() -> None:
    nvml = FakeNvml()
    with serving(source=nvml_source(nvml), cache_s=0) as (url, _):
        before = parse_prometheus(get(url + "/metrics")[2])["DCGM_FI_DEV_XID_ERRORS"]
        nvml.xids.put((0, 79))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            after = parse_prometheus(get(url + "/metrics")[2])["DCGM_FI_DEV_XID_ERRORS"]
            if after[0][1] == 79:
                break
            time.sleep(0.05)
    # GPU 1 could not register for XID events: it has no XID line (unknown, not "no error").
    assert [(labels["gpu"], labels["err_code"], value) for labels, value in before] == [
        ("0", "0", 0)
    ]
    assert [(labels["gpu"], labels["err_code"], value) for labels, value in after] == [
        ("0", "79", 79)
    ]


def test_nvml_one_lost_gpu_is_a_scrape_error_and_the_others_still_serve() -> None:
    nvml = FakeNvml()
    with serving(source=nvml_source(nvml), cache_s=0) as (url, _):
        nvml.lost.add(1)
        samples = parse_prometheus(get(url + "/metrics")[2])
        health = json.loads(get(url + "/healthz")[2])
    assert by_gpu(samples, "DCGM_FI_DEV_GPU_TEMP") == {"0": 59}
    assert samples["runwatch_agent_scrape_errors_total"][0][1] >= 1
    assert health["ok"] is False and health["reason"] == "GPU 1: GPU is lost"


def test_nvml_that_cannot_start_says_why() -> None:
    source, reason = open_source("nvml", nvml=NoDriverNvml())
    assert source is None and reason == "NVML: NVML Shared Library Not Found"

"""Where the node agent's GPU readings come from: NVML (``pynvml``), or ``nvidia-smi`` as fallback.

Readings carry the units of dcgm-exporter's classic fields (%, MiB, W, °C, MHz, mJ). A reading the
GPU or driver does not offer (``[N/A]``, NVML "Not Supported") is ``None``, never 0.
"""

from __future__ import annotations

import contextlib
import csv
import importlib
import logging
import shutil
import subprocess
import threading
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger(__name__)

SOURCES = ("auto", "nvml", "nvidia-smi", "none")
MIB = 1024 * 1024


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one moment; ``error`` is set (and no values) when reading this GPU failed."""

    index: int
    uuid: str
    name: str
    pci_bus_id: str | None = None
    driver_version: str | None = None
    gpu_util: float | None = None
    mem_util: float | None = None
    fb_used_mib: float | None = None
    fb_free_mib: float | None = None
    fb_total_mib: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    energy_mj: float | None = None
    xid: int | None = None
    error: str | None = None


class GpuSource(Protocol):
    name: str

    def read(self) -> list[GpuReading]: ...

    def close(self) -> None: ...


class SourceError(Exception):
    """A source cannot read GPUs (at start-up, or for one read); the message says why."""


# nvidia-smi: the query columns (identity, then readings) and the reading each value column fills.
_SMI_VALUES = {
    "utilization.gpu": "gpu_util",
    "utilization.memory": "mem_util",
    "memory.used": "fb_used_mib",
    "memory.free": "fb_free_mib",
    "memory.total": "fb_total_mib",
    "power.draw": "power_w",
    "temperature.gpu": "temp_c",
    "clocks.sm": "sm_clock_mhz",
    "clocks.mem": "mem_clock_mhz",
}
SMI_COLUMNS = ("index", "uuid", "name", "pci.bus_id", "driver_version", *_SMI_VALUES)


def _cell(text: str) -> str | None:
    text = text.strip()
    return None if not text or text.startswith("[") or text == "N/A" else text


def _number(text: str) -> float | None:
    cell = _cell(text)
    try:
        return None if cell is None else float(cell)
    except ValueError:
        return None


def parse_smi_csv(output: str) -> list[GpuReading]:
    """Readings from ``nvidia-smi --query-gpu=<SMI_COLUMNS> --format=csv,noheader,nounits``."""
    readings = []
    try:
        rows = list(csv.reader(output.splitlines(), skipinitialspace=True))
    except csv.Error as exc:  # a cell past csv's field limit, a stray quote ...
        raise SourceError(f"nvidia-smi output is not CSV ({exc})") from None
    for row in rows:
        if not row:
            continue
        if len(row) != len(SMI_COLUMNS):
            raise SourceError(f"expected {len(SMI_COLUMNS)} columns, got {len(row)}: {row!r:.200}")
        cells = dict(zip(SMI_COLUMNS, row, strict=True))
        values = {attr: _number(cells[column]) for column, attr in _SMI_VALUES.items()}
        index = cells["index"].strip()
        if not (index.isascii() and index.isdigit()):
            raise SourceError(f"GPU index {index[:40]!r} is not a number")
        readings.append(
            GpuReading(
                index=int(index),
                uuid=cells["uuid"].strip(),
                name=cells["name"].strip(),
                pci_bus_id=_cell(cells["pci.bus_id"]),
                driver_version=_cell(cells["driver_version"]),
                **values,  # type: ignore[arg-type]
            )
        )
    return readings


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no output"


class SmiSource:
    """Runs ``nvidia-smi`` once per read, killed after ``timeout_s``."""

    name = "nvidia-smi"

    def __init__(self, command: str = "nvidia-smi", *, timeout_s: float = 4.0) -> None:
        self.command = command
        self.timeout_s = timeout_s

    @classmethod
    def open(cls, command: str = "nvidia-smi", *, timeout_s: float = 4.0) -> SmiSource:
        """A source that has listed at least one GPU, or :class:`SourceError`."""
        path = shutil.which(command)
        if path is None:
            raise SourceError("not found on PATH")
        source = cls(path, timeout_s=timeout_s)
        if not source.read():
            raise SourceError("listed no GPUs")
        return source

    def read(self) -> list[GpuReading]:
        args = [
            self.command,
            "--query-gpu=" + ",".join(SMI_COLUMNS),
            "--format=csv,noheader,nounits",
        ]
        try:
            done = subprocess.run(args, capture_output=True, text=True, timeout=self.timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise SourceError(f"timed out after {self.timeout_s:g} s") from exc
        except OSError as exc:
            raise SourceError(str(exc)) from exc
        if done.returncode != 0:
            detail = _last_line(done.stdout + "\n" + done.stderr)
            raise SourceError(f"exit status {done.returncode}: {detail}")
        return parse_smi_csv(done.stdout)

    def close(self) -> None:
        pass


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlSource:
    """Reads GPUs through an NVML binding (the ``pynvml`` module, or a stand-in with its API)."""

    name = "nvml"

    def __init__(self, nvml: Any, handles: list[Any], *, watch_xid: bool = True) -> None:
        self._nv = nvml
        self._handles = handles
        unavailable = ("NOT_SUPPORTED", "NO_PERMISSION", "FUNCTION_NOT_FOUND", "NO_DATA")
        self._unavailable = {getattr(nvml, f"NVML_ERROR_{code}", None) for code in unavailable}
        driver = self._optional(nvml.nvmlSystemGetDriverVersion)
        self._driver = None if driver is None else _text(driver)
        self._static = [self._identity(handle) for handle in handles]
        self._xid = _XidWatcher.start(nvml, handles) if watch_xid else None

    @classmethod
    def open(cls, nvml: Any = None, *, watch_xid: bool = True) -> NvmlSource:
        """Initialise NVML and find the GPUs, or :class:`SourceError` saying why not."""
        if nvml is None:
            try:
                nvml = importlib.import_module("pynvml")
            except ImportError as exc:
                raise SourceError("pynvml is not installed") from exc
        try:
            nvml.nvmlInit()
        except Exception as exc:
            raise SourceError(str(exc) or type(exc).__name__) from exc
        try:
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
            if not handles:
                raise SourceError("no GPUs")
            return cls(nvml, handles, watch_xid=watch_xid)
        except Exception as exc:
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()
            raise SourceError(str(exc) or type(exc).__name__) from exc

    def _identity(self, handle: Any) -> tuple[str, str, str | None]:
        nv = self._nv
        pci = self._optional(nv.nvmlDeviceGetPciInfo, handle)
        bus_id = _text(pci.busId) if pci is not None else None
        return _text(nv.nvmlDeviceGetUUID(handle)), _text(nv.nvmlDeviceGetName(handle)), bus_id

    def _optional(self, call: Any, *args: Any) -> Any:
        """``call(*args)``, or None when NVML says the reading is not offered."""
        try:
            return call(*args)
        except self._nv.NVMLError as exc:
            if getattr(exc, "value", None) in self._unavailable:
                return None
            raise

    def _memory(self, handle: Any) -> Any:
        """Memory info v2 (``used`` without the driver's reservation, as nvidia-smi and DCGM
        report it) where the driver has it, else v1 (``used`` = total - free)."""
        version = getattr(self._nv, "nvmlMemory_v2", None)
        if version is not None:
            try:
                return self._nv.nvmlDeviceGetMemoryInfo(handle, version=version)
            except self._nv.NVMLError:
                pass
        return self._optional(self._nv.nvmlDeviceGetMemoryInfo, handle)

    def read(self) -> list[GpuReading]:
        return [self._read_one(index) for index in range(len(self._handles))]

    def _read_one(self, index: int) -> GpuReading:
        nv, handle = self._nv, self._handles[index]
        uuid, name, bus_id = self._static[index]
        ident: dict[str, Any] = dict(
            index=index, uuid=uuid, name=name, pci_bus_id=bus_id, driver_version=self._driver
        )
        try:
            util = self._optional(nv.nvmlDeviceGetUtilizationRates, handle)
            memory = self._memory(handle)
            power_mw = self._optional(nv.nvmlDeviceGetPowerUsage, handle)
            reading = GpuReading(
                **ident,
                gpu_util=None if util is None else util.gpu,
                mem_util=None if util is None else util.memory,
                fb_used_mib=None if memory is None else memory.used // MIB,
                fb_free_mib=None if memory is None else memory.free // MIB,
                fb_total_mib=None if memory is None else memory.total // MIB,
                power_w=None if power_mw is None else power_mw / 1000,
                temp_c=self._optional(nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU),
                sm_clock_mhz=self._optional(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_SM),
                mem_clock_mhz=self._optional(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_MEM),
                energy_mj=self._optional(nv.nvmlDeviceGetTotalEnergyConsumption, handle),
                xid=None if self._xid is None else self._xid.last.get(index),
            )
        except nv.NVMLError as exc:
            return GpuReading(**ident, error=f"GPU {index}: {exc}")
        return reading

    def close(self) -> None:
        if self._xid is not None:
            self._xid.stop()
        self._nv.nvmlShutdown()


class _XidWatcher:
    """The last XID error per GPU index (0 = none since start), from an NVML event set."""

    def __init__(self, nvml: Any, event_set: Any, indexes: list[int]) -> None:
        self._nv, self._set = nvml, event_set
        self.last: dict[int, int] = dict.fromkeys(indexes, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="runwatch-xid", daemon=True)

    @classmethod
    def start(cls, nvml: Any, handles: list[Any]) -> _XidWatcher | None:
        try:
            event_set = nvml.nvmlEventSetCreate()
            xid = nvml.nvmlEventTypeXidCriticalError
        except Exception as exc:
            log.info("XID errors not watched: %s", exc)
            return None
        indexes = []
        for index, handle in enumerate(handles):
            try:
                nvml.nvmlDeviceRegisterEvents(handle, xid, event_set)
                indexes.append(index)
            except nvml.NVMLError as exc:
                log.info("XID errors not watched on GPU %d: %s", index, exc)
        if not indexes:
            nvml.nvmlEventSetFree(event_set)
            return None
        watcher = cls(nvml, event_set, indexes)
        watcher._thread.start()
        return watcher

    def _run(self) -> None:
        nv = self._nv
        while not self._stop.is_set():
            try:
                data = nv.nvmlEventSetWait(self._set, 500)
            except nv.NVMLError as exc:
                if getattr(exc, "value", None) == nv.NVML_ERROR_TIMEOUT:
                    continue
                log.warning("runwatch agent: stopped watching XID errors: %s", exc)
                return
            if data.eventType & nv.nvmlEventTypeXidCriticalError:
                try:
                    self.last[int(nv.nvmlDeviceGetIndex(data.device))] = int(data.eventData)
                except nv.NVMLError as exc:
                    log.warning("runwatch agent: XID %d on an unknown GPU: %s", data.eventData, exc)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        if not self._thread.is_alive():
            self._nv.nvmlEventSetFree(self._set)


def open_source(
    kind: str = "auto",
    *,
    nvml: Any = None,
    smi_command: str = "nvidia-smi",
    smi_timeout_s: float = 4.0,
) -> tuple[GpuSource | None, str | None]:
    """The first source that finds GPUs (NVML, then nvidia-smi for ``auto``), or None and why."""
    if kind not in SOURCES:
        raise ValueError(f"unknown GPU source {kind!r} (expected one of {', '.join(SOURCES)})")
    if kind == "none":
        return None, "GPU readings turned off (source none)"
    reasons = []
    if kind in ("auto", "nvml"):
        try:
            return NvmlSource.open(nvml), None
        except SourceError as exc:
            reasons.append(f"NVML: {exc}")
    if kind in ("auto", "nvidia-smi"):
        try:
            source = SmiSource.open(smi_command, timeout_s=smi_timeout_s)
        except SourceError as exc:
            reasons.append(f"nvidia-smi: {exc}")
        else:
            if reasons:
                log.info("runwatch agent: %s; reading GPUs with nvidia-smi", reasons[0])
            return source, None
    return None, "; ".join(reasons)

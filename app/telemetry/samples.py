"""What every telemetry parser returns: canonical GPU samples, one scrape's worth at a time."""

from __future__ import annotations

from dataclasses import dataclass, field

# Labels that name a sub-device: each value is its own series on the same GPU.
MIG_INSTANCE = "mig_instance"
MIG_PROFILE = "mig_profile"
NVLINK = "nvlink"


class TelemetryError(ValueError):
    """Input a parser cannot use at all; the message names the source (and line, where known)."""


@dataclass(frozen=True)
class GpuSample:
    """One value of one metric of one GPU (or MIG instance).

    ``value`` is in the canonical unit of ``metric`` (see :mod:`app.telemetry.fields`); ``None``
    means the source had no value (a DCGM blank sentinel, ``[N/A]``): never read it as 0.
    ``timestamp`` (unix seconds) is set only when the source carries one (Prometheus API,
    nvidia-smi); otherwise the caller stamps the scrape time. ``known`` is False for a field the
    alias table does not know: ``metric`` is then the source's own name, lower-cased, unconverted.
    """

    metric: str
    value: float | None
    host: str | None
    gpu_uuid: str | None
    gpu_index: int | None
    model: str | None
    labels: dict[str, str]
    raw_name: str
    timestamp: float | None
    known: bool = True


@dataclass
class Scrape:
    """Everything one parse produced: samples, and non-fatal problems worth showing a user."""

    samples: list[GpuSample]
    warnings: list[str] = field(default_factory=list)
    source: str = ""


def series_key(sample: GpuSample) -> tuple[str, str, str]:
    """``(host, gpu, metric)``: a series is one metric of one physical GPU on one host.

    The GPU is its UUID (the ``gpu`` index inside a Slurm job differs from the exporter's), else
    ``index:<n>``. A MIG instance or an NVLink link is a separate series of its GPU:
    ``<uuid>/mig:<GPU_I_ID>``, ``<uuid>/nvlink:<n>``.
    """
    gpu = sample.gpu_uuid or f"index:{sample.gpu_index}"
    labels = sample.labels
    if labels:
        mig = labels.get(MIG_INSTANCE)
        if mig is not None:
            gpu = f"{gpu}/mig:{mig}"
        link = labels.get(NVLINK)
        if link is not None:
            gpu = f"{gpu}/nvlink:{link}"
    return (sample.host or "", gpu, sample.metric)

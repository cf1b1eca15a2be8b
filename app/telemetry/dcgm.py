"""dcgm-exporter's ``/metrics`` body -> canonical GPU samples.

Identity: host from the ``Hostname`` label (``hostname`` since exporter 4.8), else the scrape
target passed as ``host``; GPU UUID from ``UUID`` (``uuid`` with the 1.x namespace, ``gpu_uuid``
on per-link series); index from ``gpu``; model from ``modelName``/``model_name``. Those labels
become :class:`GpuSample` fields; the rest are kept (``pod``, ``namespace``, ``container``,
``hpc_job``, ``err_code``/``err_msg`` on XID, ``pci_bus_id``, ``device``...) except empty ones
(``pod_uid=""``), with ``GPU_I_PROFILE``/``GPU_I_ID`` renamed ``mig_profile``/``mig_instance``
and the driver-version label (either release's name) ``driver_version``.

Values: a DCGM blank sentinel is ``None`` (:func:`app.telemetry.fields.is_blank`); others are
converted to the canonical unit. NaN/Inf are kept as sent. Lines carry no timestamp (the caller
stamps the scrape), unless one is written on the line.

Series without GPU labels (exporter/agent self-metrics, NVSwitch) are skipped; for names other
than the known self-metric prefixes, once each with a warning.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.telemetry.fields import (
    INT32_BLANK,
    FieldSpec,
    convert,
    is_blank,
    out_of_range,
    resolve,
)
from app.telemetry.prometheus_text import ParsedText, iter_lines, parse_labels
from app.telemetry.samples import MIG_INSTANCE, MIG_PROFILE, GpuSample, Scrape

SOURCE = "dcgm"
IDENTITY_LABELS = frozenset(
    {"gpu", "UUID", "uuid", "gpu_uuid", "modelName", "model_name", "Hostname", "hostname"}
)
LABEL_RENAMES = {
    "GPU_I_PROFILE": MIG_PROFILE,
    "GPU_I_ID": MIG_INSTANCE,
    "DCGM_FI_DRIVER_VERSION": "driver_version",
    "DCGM_FI_SYSTEM_DRIVER_VERSION": "driver_version",
}
# Non-GPU families an exporter or the Runwatch agent serves about itself: skipped silently.
SELF_METRIC_PREFIXES = ("runwatch_agent_", "go_", "process_", "promhttp_", "dcgm_exporter_")


@dataclass(frozen=True)
class GpuIdentity:
    host: str | None
    uuid: str | None
    index: int | None
    model: str | None
    labels: dict[str, str]


def identify(labels: dict[str, str], host: str | None) -> GpuIdentity | None:
    """Split DCGM labels into a GPU's identity and the labels kept; None when not a GPU series."""
    uuid = labels.get("UUID") or labels.get("uuid") or labels.get("gpu_uuid")
    gpu = labels.get("gpu")
    if not uuid and not gpu:
        return None
    kept = {LABEL_RENAMES.get(k, k): v for k, v in labels.items() if v and k not in IDENTITY_LABELS}
    return GpuIdentity(
        host=labels.get("Hostname") or labels.get("hostname") or host,
        uuid=uuid or None,
        index=int(gpu) if gpu and gpu.isascii() and gpu.isdigit() else None,
        model=labels.get("modelName") or labels.get("model_name") or None,
        labels=kept,
    )


class SampleBuilder:
    """Turns (field, value, identity) into samples; warns once per unknown or odd field."""

    def __init__(self, warnings: list[str], source: str) -> None:
        self.warnings = warnings
        self.source = source
        self._specs: dict[str, FieldSpec] = {}
        self._odd: set[str] = set()

    def spec(self, raw_name: str) -> FieldSpec:
        spec = self._specs.get(raw_name)
        if spec is None:
            spec = self._specs[raw_name] = resolve(raw_name)
            if not spec.known:
                self.warnings.append(
                    f"{self.source}: unknown field {raw_name}: kept as {spec.metric!r}, unconverted"
                )
        return spec

    def value(
        self,
        spec: FieldSpec,
        raw_name: str,
        raw: float | None,
        *,
        factor: float | None = None,
        blanks: bool = True,
    ) -> float | None:
        """``raw`` in the canonical unit (``factor`` overrides the table's, for a source that
        states its unit); None for a DCGM blank when ``blanks``."""
        if raw is None:
            return None
        if blanks and not -1e300 < raw < INT32_BLANK and is_blank(raw, spec.narrow):
            return None
        value = convert(raw, spec.factor if factor is None else factor)
        if spec.known and raw_name not in self._odd and out_of_range(spec.metric, value):
            self._odd.add(raw_name)
            self.warnings.append(
                f"{self.source}: {raw_name}={raw!r} reads {value!r} {spec.metric}, out of range:"
                " is the unit right?"
            )
        return value

    def sample(
        self, raw_name: str, raw: float | None, ident: GpuIdentity, timestamp: float | None
    ) -> GpuSample:
        spec = self.spec(raw_name)
        return GpuSample(
            metric=spec.metric,
            value=self.value(spec, raw_name, raw),
            host=ident.host,
            gpu_uuid=ident.uuid,
            gpu_index=ident.index,
            model=ident.model,
            labels=dict(ident.labels),
            raw_name=raw_name,
            timestamp=timestamp,
            known=spec.known,
        )


def parse_dcgm(text: str, *, host: str | None = None) -> Scrape:
    """Every GPU sample in one dcgm-exporter (or Runwatch agent) scrape.

    An empty body is no samples and a warning; a body in which no line is a sample raises
    :class:`~app.telemetry.samples.TelemetryError`."""
    state = ParsedText()
    scrape = Scrape(samples=[], warnings=state.warnings, source=SOURCE)
    if not text.strip():
        state.warnings.append(f"{SOURCE}: empty body (exporter restarting?): no samples")
        return scrape
    builder = SampleBuilder(state.warnings, SOURCE)
    identities: dict[str | None, GpuIdentity | None] = {}
    skipped: set[str] = set()
    lines = 0
    for number, name, block, value, ts in iter_lines(text, state, source=SOURCE):
        if block in identities:
            ident = identities[block]
        else:
            try:
                labels = parse_labels(block) if block else {}
            except ValueError as exc:
                state.bad_lines += 1
                state.warnings.append(f"{SOURCE}: line {number}: {exc}")
                continue
            ident = identities[block] = identify(labels, host)
        lines += 1
        if ident is None:
            if name not in skipped:
                skipped.add(name)
                if not name.startswith(SELF_METRIC_PREFIXES):
                    state.warnings.append(f"{SOURCE}: {name} has no GPU labels: skipped")
            continue
        scrape.samples.append(builder.sample(name, value, ident, ts))
    state.check_not_garbage(SOURCE, found=lines)
    if not scrape.samples:
        state.warnings.append(f"{SOURCE}: no GPU samples in the scrape")
    return scrape

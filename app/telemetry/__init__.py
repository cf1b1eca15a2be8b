"""GPU telemetry from cluster nodes: pure parsers (dcgm-exporter text, nvidia-smi CSV, the
Prometheus HTTP API) that turn each source into :class:`~app.telemetry.samples.GpuSample` values
with canonical metric names and units (:mod:`app.telemetry.fields`)."""

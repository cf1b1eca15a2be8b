"""Prometheus HTTP API answers (``/api/v1/query_range``, ``/api/v1/query``) -> GPU samples.

A ``matrix`` gives one sample per ``[unix_seconds, "value"]`` pair, a ``vector`` one per series,
each stamped with Prometheus' time. Series labels are dcgm-exporter's (identity as in
:mod:`app.telemetry.dcgm`) plus Prometheus' target labels (``instance``, ``job``, ...), kept.

Values: ``"NaN"``/``"+Inf"`` are real sample values in the API and are kept as float NaN/inf
(staleness markers never reach an API answer: a stale series simply has no point). A DCGM blank
sentinel that Prometheus stored as a float is ``None``, as in a direct scrape.

Workload labels: when Prometheus renamed the exporter's own ``pod``/``namespace``/``container``
to ``exported_*`` (``honor_labels: false``), the ``exported_*`` ones are the workload's and are
kept as ``pod``/...; the target's are kept as ``target_pod``/.... A ``pod``/``container`` that
names the dcgm-exporter itself (an idle GPU, whose series carry only the target's labels) is
moved to ``target_*`` too, so an idle GPU never looks assigned to the exporter pod.

Host: the ``Hostname``/``hostname`` label, else the host part of ``instance``.
"""

from __future__ import annotations

import json
import math
from typing import Any
from urllib.parse import urlencode, urlsplit

from app.telemetry.dcgm import SampleBuilder, identify
from app.telemetry.prometheus_text import parse_value
from app.telemetry.samples import GpuSample, Scrape, TelemetryError

SOURCE = "prometheus"
MAX_POINTS = 11_000  # Prometheus refuses a range query with more points per series
_WORKLOAD = ("pod", "namespace", "container")


def parse_query_range(body: dict[str, Any] | str, *, metric_hint: str | None = None) -> Scrape:
    """Samples of a query / query_range answer (a JSON text or its decoded dict).

    Also accepts a bare result element (``{"metric": ..., "value": ...}``) or a list of them.
    ``metric_hint`` names series that lost ``__name__`` (``rate(...)``, ``avg by``...).
    ``status: error`` raises :class:`TelemetryError` with Prometheus' message."""
    doc = _decode(body)
    scrape = Scrape(samples=[], source=SOURCE)
    result = _result(doc, scrape.warnings)
    builder = SampleBuilder(scrape.warnings, SOURCE)
    unnamed = 0
    for series in result:
        if not isinstance(series, dict) or not isinstance(series.get("metric"), dict):
            what = type(series).__name__ if not isinstance(series, dict) else "an object"
            raise TelemetryError(f"{SOURCE}: a result element is not a series ({what})")
        labels = {str(k): str(v) for k, v in series["metric"].items()}
        name = labels.pop("__name__", None) or metric_hint
        if name is None:
            unnamed += 1
            continue
        points = series.get("values")
        if points is None:
            points = [series["value"]] if "value" in series else []
            if "histogram" in series or "histograms" in series:
                scrape.warnings.append(f"{SOURCE}: {name}: native histogram points skipped")
        if not isinstance(points, list):
            scrape.warnings.append(f"{SOURCE}: {name}: values are not a list; skipped")
            continue
        _add_series(scrape, builder, name, _workload(labels), points)
    if unnamed:
        scrape.warnings.append(
            f"{SOURCE}: {unnamed} series without __name__ skipped (pass metric_hint)"
        )
    return scrape


def _decode(body: dict[str, Any] | str | list[Any]) -> Any:
    if not isinstance(body, str):
        return body
    try:
        return json.loads(body)
    except json.JSONDecodeError as exc:
        raise TelemetryError(f"{SOURCE}: not JSON at line {exc.lineno}: {exc.msg}") from None
    except (ValueError, RecursionError) as exc:  # a number too long, nesting too deep
        raise TelemetryError(f"{SOURCE}: not JSON that can be read ({str(exc)[:100]})") from None


def _result(doc: Any, warnings: list[str]) -> list[Any]:
    if isinstance(doc, list):
        return doc
    if not isinstance(doc, dict):
        raise TelemetryError(f"{SOURCE}: answer is a {type(doc).__name__}, not an object")
    if "metric" in doc:
        return [doc]
    status = doc.get("status")
    if status == "error":
        kind, error = doc.get("errorType", "error"), doc.get("error", "")
        raise TelemetryError(f"{SOURCE}: query failed ({kind!s:.60}): {error!s:.300}")
    if status != "success" or not isinstance(doc.get("data"), dict):
        raise TelemetryError(f"{SOURCE}: not a query answer (status={status!r:.60})")
    found = doc.get("warnings")
    if isinstance(found, list):
        warnings.extend(f"{SOURCE}: {w[:200]}" for w in found if isinstance(w, str))
    data = doc["data"]
    kind = data.get("resultType")
    if kind not in ("matrix", "vector"):
        raise TelemetryError(f"{SOURCE}: resultType {kind!r} holds no series")
    result = data.get("result")
    if not isinstance(result, list):
        raise TelemetryError(f"{SOURCE}: data.result is not a list")
    return result


def _workload(labels: dict[str, str]) -> dict[str, str]:
    exported = any(f"exported_{k}" in labels for k in _WORKLOAD)
    own = any("dcgm-exporter" in labels.get(k, "") for k in ("pod", "container"))
    if exported or own:
        for key in _WORKLOAD:
            if key in labels:
                labels[f"target_{key}"] = labels.pop(key)
            if f"exported_{key}" in labels:
                labels[key] = labels.pop(f"exported_{key}")
    return labels


def _instance_host(labels: dict[str, str]) -> str | None:
    instance = labels.get("instance")
    if not instance:
        return None
    return urlsplit(f"//{instance}").hostname or instance


def _add_series(
    scrape: Scrape, builder: SampleBuilder, name: str, labels: dict[str, str], points: list[Any]
) -> None:
    ident = identify(labels, _instance_host(labels))
    if ident is None:
        warning = f"{SOURCE}: {name}: series without GPU labels skipped"
        if warning not in scrape.warnings:
            scrape.warnings.append(warning)
        return
    spec = builder.spec(name)
    for point in points:
        try:
            when, text = float(point[0]), str(point[1])
            raw = parse_value(text)
        except (TypeError, ValueError, IndexError, KeyError, OverflowError):
            shown = point if isinstance(point, str | int | float) else type(point).__name__
            scrape.warnings.append(f"{SOURCE}: {name}: bad point {str(shown)[:60]}")
            continue
        scrape.samples.append(
            GpuSample(
                metric=spec.metric,
                value=builder.value(spec, name, raw),
                host=ident.host,
                gpu_uuid=ident.uuid,
                gpu_index=ident.index,
                model=ident.model,
                labels=dict(ident.labels),
                raw_name=name,
                timestamp=when,
                known=spec.known,
            )
        )


def _number(x: float) -> str:
    return f"{x:.3f}".rstrip("0").rstrip(".")


def query_range_url(
    base: str, query: str, start: float, end: float, step: float | None = None
) -> list[str]:
    """``/api/v1/query_range`` URLs covering ``[start, end]`` (unix seconds) at ``step`` seconds,
    split into consecutive ranges of at most :data:`MAX_POINTS` points each (Prometheus refuses
    more per series). Without ``step``, the finest whole-second step that fits one request."""
    if not (math.isfinite(start) and math.isfinite(end)) or end < start:
        raise TelemetryError(f"{SOURCE}: bad range {start!r}..{end!r}")
    if step is None:
        step = max(1.0, math.ceil((end - start) / (MAX_POINTS - 1)))
    if not step > 0:
        raise TelemetryError(f"{SOURCE}: step must be positive, not {step!r}")
    root = base.rstrip("/")
    if not root.endswith("/api/v1/query_range"):
        root += "/api/v1/query_range"
    span = step * (MAX_POINTS - 1)
    urls = []
    t = start
    while t <= end:
        stop = min(t + span, end)
        params = {"query": query, "start": _number(t), "end": _number(stop), "step": _number(step)}
        urls.append(f"{root}?{urlencode(params)}")
        t = stop + step
        if stop >= end:
            break
    return urls

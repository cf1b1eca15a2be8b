"""Prometheus HTTP API answers -> canonical samples, and range URLs within the point limit."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from app.telemetry.prometheus_api import MAX_POINTS, parse_query_range, query_range_url
from app.telemetry.samples import TelemetryError, series_key

MIB = 1024 * 1024


def series(name: str | None, gpu: str, uuid: str, **extra: str) -> dict[str, str]:
    labels = {
        "gpu": gpu,
        "UUID": uuid,
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": "dgx-12",
        "instance": "10.1.2.3:9400",
        "job": "dcgm",
        **extra,
    }
    if name:
        labels["__name__"] = name
    return labels


def answer(kind: str, result: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": kind, "result": result}, **extra}


MATRIX = answer(
    "matrix",
    [
        {
            "metric": series("DCGM_FI_DEV_FB_USED", "0", "GPU-a", pod="train-0", namespace="ml"),
            "values": [[1700000000, "1024"], [1700000015.5, "2048"], [1700000030, "NaN"]],
        },
        {
            "metric": series("DCGM_FI_DEV_MEMORY_TEMP", "1", "GPU-b"),
            "values": [[1700000000, "9223372036854775808"], [1700000015.5, "45"]],
        },
    ],
    warnings=["query hit a partial response"],
)


def test_matrix_points_become_stamped_converted_samples() -> None:
    scrape = parse_query_range(MATRIX)
    assert scrape.source == "prometheus"
    assert scrape.warnings == ["prometheus: query hit a partial response"]
    fb = [s for s in scrape.samples if s.metric == "fb_used"]
    assert [s.timestamp for s in fb] == [1700000000.0, 1700000015.5, 1700000030.0]
    assert fb[0].value == 1024 * MIB and fb[1].value == 2048 * MIB
    assert fb[2].value is not None and math.isnan(fb[2].value)  # a real NaN, not "no value"
    first = fb[0]
    assert (first.host, first.gpu_uuid, first.gpu_index) == ("dgx-12", "GPU-a", 0)
    assert first.labels == {
        "instance": "10.1.2.3:9400",
        "job": "dcgm",
        "pod": "train-0",
        "namespace": "ml",
    }
    assert series_key(first) == ("dgx-12", "GPU-a", "fb_used")
    temps = [s.value for s in scrape.samples if s.metric == "mem_temp"]
    assert temps == [None, 45.0]  # the exporter's blank sentinel, stored by Prometheus as 2**63


def test_json_text_and_vector_answers() -> None:
    body = answer(
        "vector",
        [
            {
                "metric": series("DCGM_FI_DEV_POWER_USAGE", "3", "GPU-d"),
                "value": [1700000100.25, "612.5"],
            }
        ],
    )
    scrape = parse_query_range(json.dumps(body))
    (sample,) = scrape.samples
    assert (sample.metric, sample.value, sample.timestamp) == ("power", 612.5, 1700000100.25)


def test_bare_result_element_is_accepted() -> None:
    element = {"metric": series("DCGM_FI_DEV_GPU_UTIL", "1", "GPU-b"), "value": [1.5, "88"]}
    (sample,) = parse_query_range(element).samples
    assert sample.metric == "gpu_util" and sample.value == 88.0


def test_error_status_raises_with_prometheus_message() -> None:
    body = {"status": "error", "errorType": "bad_data", "error": "exceeded maximum resolution"}
    with pytest.raises(TelemetryError, match=r"bad_data.*exceeded maximum resolution"):
        parse_query_range(body)
    with pytest.raises(TelemetryError, match="not JSON"):
        parse_query_range("<html>502</html>")
    with pytest.raises(TelemetryError, match="scalar"):
        parse_query_range(answer("scalar", [1, "1"]))  # type: ignore[list-item]


def test_exported_labels_are_the_workloads_and_the_exporters_own_are_set_aside() -> None:
    assigned = series(
        "DCGM_FI_DEV_GPU_UTIL",
        "0",
        "GPU-a",
        pod="nvidia-dcgm-exporter-x1",
        namespace="gpu-operator",
        container="nvidia-dcgm-exporter",
        exported_pod="train-0",
        exported_namespace="ml",
        exported_container="worker",
    )
    idle = series(
        "DCGM_FI_DEV_GPU_UTIL",
        "1",
        "GPU-b",
        pod="nvidia-dcgm-exporter-x1",
        namespace="gpu-operator",
        container="nvidia-dcgm-exporter",
    )
    body = answer(
        "vector", [{"metric": assigned, "value": [1, "99"]}, {"metric": idle, "value": [1, "0"]}]
    )
    busy, free = parse_query_range(body).samples
    assert (busy.labels["pod"], busy.labels["namespace"], busy.labels["container"]) == (
        "train-0",
        "ml",
        "worker",
    )
    assert busy.labels["target_pod"] == "nvidia-dcgm-exporter-x1"
    assert "pod" not in free.labels and free.labels["target_namespace"] == "gpu-operator"


def test_host_from_instance_and_metric_hint_for_unnamed_series() -> None:
    labels = series(None, "2", "GPU-c")
    del labels["Hostname"]
    body = answer("matrix", [{"metric": labels, "values": [[10, "0.5"]]}])
    skipped = parse_query_range(body)
    assert skipped.samples == [] and "metric_hint" in skipped.warnings[0]
    (sample,) = parse_query_range(body, metric_hint="DCGM_FI_PROF_SM_ACTIVE").samples
    assert (sample.metric, sample.value, sample.host) == ("sm_active", 0.5, "10.1.2.3")


def points(url: str) -> tuple[float, float, float]:
    query = parse_qs(urlsplit(url).query)
    return float(query["start"][0]), float(query["end"][0]), float(query["step"][0])


def test_short_range_is_one_url() -> None:
    (url,) = query_range_url(
        "http://prom:9090/", 'DCGM_FI_DEV_GPU_UTIL{Hostname="a"}', 100, 3700, 15
    )
    assert url.startswith("http://prom:9090/api/v1/query_range?")
    assert parse_qs(urlsplit(url).query)["query"] == ['DCGM_FI_DEV_GPU_UTIL{Hostname="a"}']
    assert points(url) == (100.0, 3700.0, 15.0)


def test_long_range_is_split_within_the_point_limit_without_gaps_or_overlap() -> None:
    start, end, step = 1_700_000_000.0, 1_700_000_000.0 + 7 * 86400, 5.0
    urls = query_range_url("http://prom:9090", "up", start, end, step)
    assert len(urls) == 11
    ranges = [points(u) for u in urls]
    assert ranges[0][0] == start and ranges[-1][1] == end
    for a, b in itertools.pairwise(ranges):
        assert b[0] == a[1] + step  # the next point on the same step grid
    assert all((e - s) / st + 1 <= MAX_POINTS for s, e, st in ranges)


def test_step_is_computed_to_fit_one_request_and_bad_ranges_fail() -> None:
    (url,) = query_range_url("http://prom:9090", "up", 0, 30 * 86400)
    start, end, step = points(url)
    assert (end - start) / step + 1 <= MAX_POINTS and step == 236.0
    with pytest.raises(TelemetryError):
        query_range_url("http://prom:9090", "up", 10, 5, 1)
    with pytest.raises(TelemetryError):
        query_range_url("http://prom:9090", "up", 0, 5, 0)

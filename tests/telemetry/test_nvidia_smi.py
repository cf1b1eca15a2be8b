"""nvidia-smi --query-gpu CSV -> canonical samples, with and without header and units."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.telemetry.nvidia_smi import QUERY_COLUMNS, parse_cell, parse_nvidia_smi_csv
from app.telemetry.samples import GpuSample, TelemetryError, series_key

MIB = 1024 * 1024
COLUMNS = [
    "timestamp",
    "index",
    "uuid",
    "name",
    "utilization.gpu",
    "utilization.memory",
    "memory.used",
    "memory.total",
    "power.draw",
    "temperature.gpu",
    "clocks.sm",
]
WITH_UNITS = """\
timestamp, index, uuid, name, utilization.gpu [%], utilization.memory [%], memory.used [MiB], \
memory.total [MiB], power.draw [W], temperature.gpu, clocks.current.sm [MHz]
2025/03/01 14:00:05.250, 0, GPU-aaaa, NVIDIA A100-SXM4-80GB, 93 %, 41 %, 70001 MiB, 81920 MiB, \
401.17 W, 66, 1410 MHz
2025/03/01 14:00:05.251, 1, GPU-bbbb, NVIDIA A100-SXM4-80GB, [N/A], 0 %, [Not Supported], \
81920 MiB, [Insufficient Permissions], 31, 210 MHz
"""
NO_HEADER_NO_UNITS = """\
2025/03/01 14:00:05.250, 0, GPU-aaaa, NVIDIA A100-SXM4-80GB, 93, 41, 70001, 81920, 401.17, 66, 1410
2025/03/01 14:00:05.251, 1, GPU-bbbb, NVIDIA A100-SXM4-80GB, [N/A], 0, [N/A], 81920, [N/A], 31, 210
"""


def value(samples: list[GpuSample], metric: str, index: int) -> float | None:
    (found,) = [s for s in samples if s.metric == metric and s.gpu_index == index]
    return found.value


def check_a100_pair(samples: list[GpuSample]) -> None:
    assert len(samples) == 2 * 7  # one sample per GPU per value column
    assert value(samples, "gpu_util", 0) == 93.0
    assert value(samples, "mem_copy_util", 0) == 41.0
    assert value(samples, "fb_used", 0) == 70001 * MIB
    assert value(samples, "fb_total", 1) == 81920 * MIB
    assert value(samples, "power", 0) == 401.17
    assert value(samples, "temp", 1) == 31.0
    assert value(samples, "sm_clock", 0) == 1_410_000_000.0
    assert value(samples, "gpu_util", 1) is None  # [N/A], never 0
    assert value(samples, "fb_used", 1) is None
    assert value(samples, "power", 1) is None
    first = samples[0]
    assert (first.host, first.gpu_uuid, first.model) == (
        "node-4",
        "GPU-aaaa",
        "NVIDIA A100-SXM4-80GB",
    )
    utc = datetime(2025, 3, 1, 14, 0, 5, 250000, tzinfo=UTC).timestamp()
    assert first.timestamp == utc
    assert series_key(first) == ("node-4", "GPU-aaaa", first.metric)


def test_header_with_units_in_cells() -> None:
    scrape = parse_nvidia_smi_csv(WITH_UNITS, host="node-4")
    assert scrape.source == "nvidia-smi" and scrape.warnings == []
    check_a100_pair(scrape.samples)
    assert {s.raw_name for s in scrape.samples} >= {"clocks.current.sm", "utilization.gpu"}


def test_noheader_nounits_with_columns_given() -> None:
    scrape = parse_nvidia_smi_csv(NO_HEADER_NO_UNITS, host="node-4", columns=COLUMNS)
    assert scrape.warnings == []
    check_a100_pair(scrape.samples)


def test_header_without_units_in_cells() -> None:
    header = ", ".join(COLUMNS)
    scrape = parse_nvidia_smi_csv(header + "\n" + NO_HEADER_NO_UNITS, host="node-4")
    check_a100_pair(scrape.samples)


def test_node_local_timestamp_is_shifted_by_the_node_offset() -> None:
    scrape = parse_nvidia_smi_csv(WITH_UNITS, host="node-4", tz_offset_s=2 * 3600)  # UTC+2
    utc = datetime(2025, 3, 1, 12, 0, 5, 250000, tzinfo=UTC).timestamp()
    assert scrape.samples[0].timestamp == utc


def test_default_query_columns_without_header() -> None:
    row = (
        "2025/03/01 14:00:05.250, 3, GPU-cccc, NVIDIA H100 80GB HBM3, 00000000:9B:00.0, 100, 11,"
        " 19818, 61741, 81559, 631.95, 59, 1980, 2619, 5, 16, 0, [N/A]"
    )
    assert len(row.split(",")) == len(QUERY_COLUMNS)
    scrape = parse_nvidia_smi_csv(row + "\n", host="gpu-9")
    got = {s.metric: s.value for s in scrape.samples}
    assert got["fb_free"] == 61741 * MIB and got["mem_clock"] == 2_619_000_000.0
    assert got["pcie_link_gen"] == 5.0 and got["pcie_link_width"] == 16.0
    assert got["ecc_sbe_vol"] == 0.0 and got["ecc_dbe_vol"] is None
    assert scrape.samples[0].labels == {"pci_bus_id": "00000000:9B:00.0"}
    assert scrape.samples[0].gpu_index == 3


def test_loop_output_gives_one_sample_per_row_and_skips_repeated_headers() -> None:
    header = "timestamp, uuid, power.draw [W]"
    body = "\n".join(
        [
            header,
            "2025/03/01 14:00:00.000, GPU-aaaa, 69.85 W",
            header,
            "2025/03/01 14:00:01.000, GPU-aaaa, 631.95 W",
        ]
    )
    scrape = parse_nvidia_smi_csv(body, host="n")
    assert [(s.value, s.timestamp) for s in scrape.samples] == [
        (69.85, datetime(2025, 3, 1, 14, 0, 0, tzinfo=UTC).timestamp()),
        (631.95, datetime(2025, 3, 1, 14, 0, 1, tzinfo=UTC).timestamp()),
    ]


def test_no_index_or_uuid_numbers_gpus_by_row() -> None:
    body = "utilization.gpu [%], power.draw [W]\n12 %, 80.5 W\n99 %, 600 W\n"
    scrape = parse_nvidia_smi_csv(body, host="n")
    assert [s.gpu_index for s in scrape.samples] == [0, 0, 1, 1]
    assert len(scrape.warnings) == 1


def test_unknown_and_textual_columns() -> None:
    body = (
        "index, pstate, clocks_event_reasons.active, compute_mode\n"
        "0, P0, 0x0000000000000004, Default\n"
    )
    scrape = parse_nvidia_smi_csv(body, host="n")
    got = {s.raw_name: (s.metric, s.value, s.known) for s in scrape.samples}
    assert got["pstate"] == ("pstate", 0.0, True)
    assert got["clocks_event_reasons.active"] == ("clocks_event_reasons.active", 4.0, False)
    assert got["compute_mode"] == ("compute_mode", None, False)
    assert len(scrape.warnings) == 3  # two unknown columns, one non-numeric cell


def test_parse_cell() -> None:
    assert parse_cell(" 45 %") == (45.0, "%")
    assert parse_cell("19818 MiB") == (19818.0, "MiB")
    assert parse_cell("[Unknown Error]") == (None, None)
    assert parse_cell("N/A") == (None, None)
    assert parse_cell("Enabled") == (1.0, None)
    with pytest.raises(ValueError):
        parse_cell("Default")


def test_error_text_instead_of_csv_is_an_error() -> None:
    with pytest.raises(TelemetryError, match="nvidia-smi"):
        parse_nvidia_smi_csv("No devices were found\n", host="n")
    with pytest.raises(TelemetryError, match="line 1"):
        parse_nvidia_smi_csv(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
            host="n",
            columns=COLUMNS,
        )


def test_short_row_is_a_warning_and_empty_output_no_samples() -> None:
    body = WITH_UNITS + "2025/03/01 14:00:06.000, 2, GPU-dddd\n"
    scrape = parse_nvidia_smi_csv(body, host="node-4")
    assert len(scrape.samples) == 14
    assert len(scrape.warnings) == 1 and "line 4" in scrape.warnings[0]
    empty = parse_nvidia_smi_csv("\n", host="n")
    assert empty.samples == [] and len(empty.warnings) == 1

"""dcgm-exporter scrapes -> canonical samples, on captures written from the exporter's formats."""

from __future__ import annotations

import time

import pytest

from app.telemetry.dcgm import parse_dcgm
from app.telemetry.samples import GpuSample, TelemetryError, series_key

MIB = 1024 * 1024
UUID_A = "GPU-11111111-2222-3333-4444-555555555555"
UUID_B = "GPU-66666666-7777-8888-9999-000000000000"
BASE_A = f'gpu="0",UUID="{UUID_A}",pci_bus_id="00000000:18:00.0",device="nvidia0"'
BASE_B = f'gpu="1",UUID="{UUID_B}",pci_bus_id="00000000:2A:00.0",device="nvidia1"'
MODEL = 'modelName="NVIDIA H100 80GB HBM3",Hostname="trainer-03"'
POD = 'container="trainer",namespace="llm",pod="pretrain-7b-worker-0"'
XID = 'err_code="79",err_msg="GPU has fallen off the bus"'
# GPU 0 runs a pod; GPU 1 is idle (no pod labels); one MIG instance of GPU 1; old field names.
CURRENT = f"""\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{{{BASE_A},{MODEL},DCGM_FI_DRIVER_VERSION="570.86.15",{POD}}} 97
DCGM_FI_DEV_GPU_UTIL{{{BASE_B},{MODEL},DCGM_FI_DRIVER_VERSION="570.86.15"}} 0
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{{{BASE_A},{MODEL},{POD}}} 61440
DCGM_FI_DEV_FB_USED{{{BASE_B},{MODEL}}} 0
DCGM_FI_DEV_FB_USED{{{BASE_B},{MODEL},GPU_I_PROFILE="3g.40gb",GPU_I_ID="2"}} 2048
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{{{BASE_A},{MODEL},{POD}}} 652.5
DCGM_FI_DEV_POWER_USAGE{{{BASE_B},{MODEL}}} 70.25
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{{{BASE_A},{MODEL},{POD}}} 1980
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{BASE_A},{MODEL},{POD}}} 3141592653
# TYPE DCGM_FI_DEV_MEMORY_TEMP gauge
DCGM_FI_DEV_MEMORY_TEMP{{{BASE_A},{MODEL},{POD}}} 9223372036854775794
DCGM_FI_DEV_MEMORY_TEMP{{{BASE_B},{MODEL}}} 38
# TYPE DCGM_FI_DEV_XID_ERRORS gauge
DCGM_FI_DEV_XID_ERRORS{{{BASE_A},{MODEL},{POD},{XID}}} 79
# TYPE DCGM_FI_PROF_SM_ACTIVE gauge
DCGM_FI_PROF_SM_ACTIVE{{{BASE_A},{MODEL},{POD}}} 0.8125
DCGM_FI_PROF_SM_ACTIVE{{{BASE_B},{MODEL},GPU_I_PROFILE="3g.40gb",GPU_I_ID="2"}} 0.25
"""


def by(samples: list[GpuSample], metric: str, uuid: str, mig: str | None = None) -> GpuSample:
    found = [
        s
        for s in samples
        if s.metric == metric and s.gpu_uuid == uuid and s.labels.get("mig_instance") == mig
    ]
    assert len(found) == 1, (metric, uuid, mig, found)
    return found[0]


def test_current_format_identity_units_and_labels() -> None:
    scrape = parse_dcgm(CURRENT, host="10.0.0.3")
    assert scrape.source == "dcgm"
    assert scrape.warnings == []
    samples = scrape.samples
    assert len(samples) == 14
    busy = by(samples, "gpu_util", UUID_A)
    assert busy.value == 97.0
    assert (busy.host, busy.gpu_index, busy.model) == ("trainer-03", 0, "NVIDIA H100 80GB HBM3")
    assert busy.labels["pod"] == "pretrain-7b-worker-0"
    assert busy.labels["namespace"] == "llm" and busy.labels["container"] == "trainer"
    assert busy.labels["driver_version"] == "570.86.15"
    assert busy.raw_name == "DCGM_FI_DEV_GPU_UTIL" and busy.timestamp is None and busy.known
    idle = by(samples, "gpu_util", UUID_B)
    assert idle.value == 0.0 and idle.gpu_index == 1
    assert not {"pod", "namespace", "container"} & idle.labels.keys()
    assert by(samples, "fb_used", UUID_A).value == 61440 * MIB
    assert by(samples, "power", UUID_B).value == 70.25
    assert by(samples, "sm_clock", UUID_A).value == 1_980_000_000.0
    assert by(samples, "energy", UUID_A).value == 3_141_592.653  # mJ counter -> J
    assert by(samples, "sm_active", UUID_A).value == 0.8125


def test_blank_sentinel_is_none_never_a_temperature() -> None:
    samples = parse_dcgm(CURRENT).samples
    assert by(samples, "mem_temp", UUID_A).value is None
    assert by(samples, "mem_temp", UUID_B).value == 38.0


def test_xid_keeps_error_code_and_message() -> None:
    xid = by(parse_dcgm(CURRENT).samples, "xid", UUID_A)
    assert xid.value == 79.0
    assert xid.labels["err_code"] == "79"
    assert xid.labels["err_msg"] == "GPU has fallen off the bus"


def test_mig_instance_is_its_own_series_without_gpu_util() -> None:
    samples = parse_dcgm(CURRENT).samples
    mig = by(samples, "fb_used", UUID_B, mig="2")
    assert mig.value == 2048 * MIB and mig.labels["mig_profile"] == "3g.40gb"
    whole = by(samples, "fb_used", UUID_B)
    assert series_key(mig) == ("trainer-03", f"{UUID_B}/mig:2", "fb_used")
    assert series_key(whole) == ("trainer-03", UUID_B, "fb_used")
    mig_metrics = {s.metric for s in samples if s.labels.get("mig_instance") == "2"}
    assert mig_metrics == {"fb_used", "sm_active"}


def test_series_are_keyed_on_host_and_uuid() -> None:
    keys = {series_key(s) for s in parse_dcgm(CURRENT).samples}
    assert ("trainer-03", UUID_A, "power") in keys
    assert len(keys) == 14


OLD = f"""\
DCGM_FI_DEV_SM_CLOCK{{gpu="0", UUID="{UUID_A}"}} 1410
DCGM_FI_DEV_MEM_CLOCK{{gpu="0", UUID="{UUID_A}"}} 1215
DCGM_FI_DEV_GPU_TEMP{{gpu="0", UUID="{UUID_A}"}} 9223372036854775792
dcgm_gpu_temp{{gpu="1", uuid="{UUID_B}"}} 44
dcgm_fb_used{{gpu="1", uuid="{UUID_B}"}} 512
"""


def test_old_exporter_space_after_comma_and_host_from_scrape_target() -> None:
    scrape = parse_dcgm(OLD, host="node17:9400")
    assert scrape.warnings == []
    clock = by(scrape.samples, "sm_clock", UUID_A)
    assert clock.value == 1_410_000_000.0 and clock.host == "node17:9400" and clock.labels == {}
    assert by(scrape.samples, "mem_clock", UUID_A).value == 1_215_000_000.0
    assert by(scrape.samples, "temp", UUID_A).value is None
    legacy = by(scrape.samples, "temp", UUID_B)  # 1.x names with a lower-case uuid label
    assert legacy.value == 44.0 and legacy.gpu_index == 1
    assert by(scrape.samples, "fb_used", UUID_B).value == 512 * MIB


# Exporter 4.9 style: renamed fields in base units, lower-case hostname, renamed driver label.
SLURM = 'model_name="NVIDIA H100",DCGM_FI_SYSTEM_DRIVER_VERSION="590.1",hpc_job="4242"'
NEW = f"""\
# TYPE DCGM_FI_DEV_GPU_UTIL_RATIO gauge
DCGM_FI_DEV_GPU_UTIL_RATIO{{{BASE_A},hostname="n9",{SLURM}}} 0.97
DCGM_FI_DEV_FB_USED_BYTES{{{BASE_A},hostname="n9"}} 64424509440
DCGM_FI_DEV_FB_CAPACITY_BYTES{{{BASE_A},hostname="n9"}} 85520809984
DCGM_FI_DEV_SM_CLOCK_HERTZ{{{BASE_A},hostname="n9"}} 1980000000
DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL{{{BASE_A},hostname="n9"}} 3141592.653
DCGM_FI_DEV_BOARD_POWER_WATTS{{{BASE_A},hostname="n9"}} 652.5
DCGM_FI_DEV_GPU_TEMP_CELSIUS{{{BASE_A},hostname="n9"}} 61
DCGM_FI_DEV_XID_ERROR{{{BASE_A},hostname="n9",err_code="0",err_msg="No Error"}} 0
DCGM_FI_PROF_TENSOR_UTIL_RATIO{{{BASE_A},hostname="n9"}} 0.07
DCGM_FI_DEV_PCIE_REPLAY_TOTAL{{{BASE_A},hostname="n9"}} 3
"""


def test_release_4_9_names_and_units_land_on_the_same_canonical_values() -> None:
    scrape = parse_dcgm(NEW, host="ignored")
    assert scrape.warnings == []
    s = scrape.samples
    util = by(s, "gpu_util", UUID_A)
    assert util.value == 97.0 and util.host == "n9" and util.model == "NVIDIA H100"
    assert util.labels == {
        "pci_bus_id": "00000000:18:00.0",
        "device": "nvidia0",
        "driver_version": "590.1",
        "hpc_job": "4242",
    }
    assert by(s, "fb_used", UUID_A).value == 61440 * MIB
    assert by(s, "fb_total", UUID_A).value == 85520809984.0
    assert by(s, "sm_clock", UUID_A).value == 1_980_000_000.0
    assert by(s, "energy", UUID_A).value == 3_141_592.653
    assert by(s, "power", UUID_A).value == 652.5
    assert by(s, "temp", UUID_A).value == 61.0
    assert by(s, "xid", UUID_A).value == 0.0
    assert by(s, "tensor_active", UUID_A).value == 0.07
    assert by(s, "pcie_replay", UUID_A).value == 3.0


def test_sentinels_by_field_width() -> None:
    body = "\n".join(
        f'{name}{{gpu="0",UUID="{UUID_A}"}} {value}'
        for name, value in [
            ("DCGM_FI_DEV_GPU_UTIL", "2147483632"),  # int32 blank on a percentage
            ("DCGM_FI_DEV_POWER_USAGE", "140737488355328"),  # fp64 blank
            ("DCGM_FI_DEV_MEM_COPY_UTIL", "2147483647"),
            ("DCGM_FI_DEV_GPU_TEMP", "9223372036854775795"),  # int64 no-permission
            ("DCGM_FI_PROF_DRAM_ACTIVE", "1.7976931348623157e+308"),
            ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "2147483632"),  # a real 2147 kJ counter
        ]
    )
    values = {s.metric: s.value for s in parse_dcgm(body).samples}
    assert values == {
        "gpu_util": None,
        "power": None,
        "mem_copy_util": None,
        "temp": None,
        "dram_active": None,
        "energy": 2_147_483.632,
    }


def test_unknown_field_is_kept_flagged_and_warned_once() -> None:
    body = (
        f'DCGM_FI_DEV_VGPU_LICENSE_STATUS{{gpu="0",UUID="{UUID_A}"}} 1\n'
        f'DCGM_FI_DEV_VGPU_LICENSE_STATUS{{gpu="1",UUID="{UUID_B}"}} 0\n'
    )
    scrape = parse_dcgm(body)
    assert [(s.metric, s.value, s.known) for s in scrape.samples] == [
        ("dcgm_fi_dev_vgpu_license_status", 1.0, False),
        ("dcgm_fi_dev_vgpu_license_status", 0.0, False),
    ]
    assert len(scrape.warnings) == 1 and "DCGM_FI_DEV_VGPU_LICENSE_STATUS" in scrape.warnings[0]


def test_value_out_of_its_unit_range_is_warned() -> None:
    body = f'DCGM_FI_DEV_GPU_UTIL_RATIO{{gpu="0",UUID="{UUID_A}"}} 45\n'
    scrape = parse_dcgm(body)
    assert scrape.samples[0].value == 4500.0
    assert len(scrape.warnings) == 1 and "out of range" in scrape.warnings[0]


def test_self_metrics_are_skipped_and_other_gpu_less_series_warned() -> None:
    body = (
        "runwatch_agent_up 1\nrunwatch_agent_gpus 8\n"
        'DCGM_FI_DEV_NVSWITCH_TEMPERATURE_CURRENT{nvswitch="0"} 40\n'
        f'DCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="{UUID_A}"}} 40\n'
    )
    scrape = parse_dcgm(body)
    assert [s.metric for s in scrape.samples] == ["temp"]
    assert len(scrape.warnings) == 1 and "NVSWITCH" in scrape.warnings[0]


def test_agent_without_gpus_warns() -> None:
    scrape = parse_dcgm("runwatch_agent_up 1\n")
    assert scrape.samples == [] and scrape.warnings == ["dcgm: no GPU samples in the scrape"]


def test_empty_body_is_no_samples_and_a_warning() -> None:
    scrape = parse_dcgm("", host="n1")
    assert scrape.samples == [] and len(scrape.warnings) == 1


def test_garbage_body_is_an_error_naming_the_source_and_line() -> None:
    with pytest.raises(TelemetryError, match=r"dcgm: .*line 1"):
        parse_dcgm("Service Unavailable\nupstream connect error\n")


def test_garbage_line_among_samples_is_a_warning() -> None:
    scrape = parse_dcgm(OLD + "}}}garbage{{{\n")
    assert len(scrape.samples) == 5
    assert len(scrape.warnings) == 1 and "line 6" in scrape.warnings[0]


def generated_scrape(gpus: int, fields: list[str]) -> str:
    lines = []
    for field in fields:
        lines += [f"# HELP {field} generated", f"# TYPE {field} gauge"]
        for g in range(gpus):
            labels = (
                f'gpu="{g % 8}",UUID="GPU-{g:08d}-0000-0000-0000-000000000000",'
                f'pci_bus_id="00000000:{g % 256:02X}:00.0",device="nvidia{g % 8}",'
                f'modelName="NVIDIA H100 80GB HBM3",Hostname="node-{g // 8:04d}",'
                f'DCGM_FI_DRIVER_VERSION="570.86.15",container="main",namespace="train",'
                f'pod="job-{g // 8}"'
            )
            lines.append(f"{field}{{{labels}}} {g % 100}")
    return "\n".join(lines) + "\n"


FIELDS = [
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_TOTAL",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
]


def test_thousand_gpus_by_twenty_fields_parse_well_under_a_second() -> None:
    text = generated_scrape(1000, FIELDS)
    started = time.perf_counter()
    scrape = parse_dcgm(text)
    elapsed = time.perf_counter() - started
    print(f"parse_dcgm: 1000 GPUs x 20 fields ({len(text) / 1e6:.1f} MB) in {elapsed:.3f} s")
    assert len(scrape.samples) == 20_000
    assert len({series_key(s) for s in scrape.samples}) == 20_000
    assert elapsed < 2.0

"""The alias + unit table: every source field name -> (canonical metric, factor to its unit).

Canonical units: utilisations in percent 0-100 (``gpu_util``, ``mem_copy_util``, ...), profiling
activities as ratios 0-1 (``sm_active``, ``tensor_active``, ...), memory in bytes, clocks in Hz,
power in W, temperatures in °C, energy in J (a counter), PCIe/NVLink rates in bytes/s.

Covered names: dcgm-exporter's classic fields (``default-counters.csv``,
``dcp-metrics-included.csv``), the lower-case 1.x-compatibility names (``dcgm_gpu_temp``), the
DCGM 4.6+/exporter 4.9 names with unit suffixes, and nvidia-smi ``--query-gpu`` columns.

Assumed, not verified against a 4.9.0 scrape: which 4.9 names carry new units. The table takes
DCGM's base-unit fields at their word -- ``*_UTIL_RATIO`` are 0-1 ratios, ``*_BYTES`` bytes,
``*_HERTZ`` Hz, ``*_JOULES_TOTAL`` J, ``*_BYTES_PER_SECOND`` bytes/s -- and the pure renames
(``*_TEMP_CELSIUS``, ``BOARD_POWER_WATTS``, ``XID_ERROR``, ``PROF_*_UTIL_RATIO``,
``PCIE_REPLAY_TOTAL``, ``NVLINK_THROUGHPUT_TOTAL``) in the old field's unit. A value outside a
metric's range (e.g. a "ratio" of 45) is reported by :func:`out_of_range` so a wrong guess shows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# unit -> (dimension, size in the dimension's base unit)
UNITS: dict[str, tuple[str, float]] = {
    "%": ("fraction", 0.01),
    "ratio": ("fraction", 1.0),
    "B": ("bytes", 1.0),
    "KiB": ("bytes", 1024.0),
    "MiB": ("bytes", 1024.0**2),
    "GiB": ("bytes", 1024.0**3),
    "Hz": ("frequency", 1.0),
    "kHz": ("frequency", 1e3),
    "MHz": ("frequency", 1e6),
    "GHz": ("frequency", 1e9),
    "W": ("power", 1.0),
    "mW": ("power", 1e-3),
    "C": ("temperature", 1.0),
    "J": ("energy", 1.0),
    "mJ": ("energy", 1e-3),
    "B/s": ("rate", 1.0),
    "KiB/s": ("rate", 1024.0),
    "MB/s": ("rate", 1e6),
    "1": ("count", 1.0),
}


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    kind: str = "gauge"  # or "counter"
    low: float | None = None
    high: float | None = None


def _pct(name: str) -> Metric:
    return Metric(name, "%", low=0.0, high=100.0)


def _ratio(name: str) -> Metric:
    return Metric(name, "ratio", low=0.0, high=1.0)


def _count(name: str) -> Metric:
    return Metric(name, "1", kind="counter", low=0.0)


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        *map(_pct, ("gpu_util", "mem_copy_util", "enc_util", "dec_util")),
        *(Metric(n, "B", low=0.0) for n in ("fb_used", "fb_free", "fb_total", "fb_reserved")),
        Metric("power", "W", low=0.0),
        Metric("power_limit", "W", low=0.0),
        Metric("energy", "J", kind="counter", low=0.0),
        Metric("temp", "C"),
        Metric("mem_temp", "C"),
        *(Metric(n, "Hz", low=0.0) for n in ("sm_clock", "mem_clock", "gr_clock")),
        Metric("xid", "1"),
        *map(_ratio, ("gr_engine_active", "sm_active", "sm_occupancy", "tensor_active")),
        *map(_ratio, ("dram_active", "fp64_active", "fp32_active", "fp16_active")),
        *(Metric(n, "B/s", low=0.0) for n in ("pcie_tx", "pcie_rx", "nvlink_tx", "nvlink_rx")),
        Metric("nvlink_total", "B/s", low=0.0),
        *(Metric(n, "B", kind="counter", low=0.0) for n in ("pcie_tx_total", "pcie_rx_total")),
        *map(_count, ("pcie_replay", "ecc_sbe_vol", "ecc_dbe_vol", "ecc_sbe_agg", "ecc_dbe_agg")),
        *map(_count, ("retired_sbe", "retired_dbe")),
        *map(_count, ("remapped_rows_correctable", "remapped_rows_uncorrectable")),
        Metric("retired_pending", "1"),
        Metric("row_remap_failure", "1"),
        Metric("fan_speed", "%", low=0.0),  # can exceed 100 % by DCGM's own definition
        Metric("pstate", "1"),
        Metric("pcie_link_gen", "1"),
        Metric("pcie_link_width", "1"),
    )
}

# (canonical metric, unit the source reports in, source names)
_ALIASES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("gpu_util", "%", ("DCGM_FI_DEV_GPU_UTIL", "dcgm_gpu_utilization", "utilization.gpu")),
    ("gpu_util", "ratio", ("DCGM_FI_DEV_GPU_UTIL_RATIO",)),
    ("mem_copy_util", "%", ("DCGM_FI_DEV_MEM_COPY_UTIL", "dcgm_mem_copy_utilization")),
    ("mem_copy_util", "%", ("utilization.memory",)),
    # Guessed spellings, harmless if absent: *_MEM_COPY_UTIL_RATIO, *_FB_TOTAL_BYTES, *_FP16_*.
    ("mem_copy_util", "ratio", ("DCGM_FI_DEV_MEMORY_UTIL_RATIO",)),
    ("mem_copy_util", "ratio", ("DCGM_FI_DEV_MEM_COPY_UTIL_RATIO",)),
    ("enc_util", "%", ("DCGM_FI_DEV_ENC_UTIL", "dcgm_enc_utilization", "utilization.encoder")),
    ("enc_util", "ratio", ("DCGM_FI_DEV_ENC_UTIL_RATIO",)),
    ("dec_util", "%", ("DCGM_FI_DEV_DEC_UTIL", "dcgm_dec_utilization", "utilization.decoder")),
    ("dec_util", "ratio", ("DCGM_FI_DEV_DEC_UTIL_RATIO",)),
    ("fb_used", "MiB", ("DCGM_FI_DEV_FB_USED", "dcgm_fb_used", "memory.used")),
    ("fb_used", "B", ("DCGM_FI_DEV_FB_USED_BYTES",)),
    ("fb_free", "MiB", ("DCGM_FI_DEV_FB_FREE", "dcgm_fb_free", "memory.free")),
    ("fb_free", "B", ("DCGM_FI_DEV_FB_FREE_BYTES",)),
    ("fb_total", "MiB", ("DCGM_FI_DEV_FB_TOTAL", "dcgm_fb_total", "memory.total")),
    ("fb_total", "B", ("DCGM_FI_DEV_FB_CAPACITY_BYTES", "DCGM_FI_DEV_FB_TOTAL_BYTES")),
    ("fb_reserved", "MiB", ("DCGM_FI_DEV_FB_RESERVED", "memory.reserved")),
    ("fb_reserved", "B", ("DCGM_FI_DEV_FB_RESERVED_BYTES",)),
    ("power", "W", ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_BOARD_POWER_WATTS")),
    ("power", "W", ("dcgm_power_usage", "power.draw")),
    ("power_limit", "W", ("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "enforced.power.limit")),
    ("energy", "mJ", ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "dcgm_total_energy_consumption")),
    ("energy", "J", ("DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL",)),
    ("temp", "C", ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP_CELSIUS", "dcgm_gpu_temp")),
    ("temp", "C", ("temperature.gpu",)),
    ("mem_temp", "C", ("DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS")),
    ("mem_temp", "C", ("dcgm_memory_temp", "temperature.memory")),
    (
        "sm_clock",
        "MHz",
        ("DCGM_FI_DEV_SM_CLOCK", "dcgm_sm_clock", "clocks.sm", "clocks.current.sm"),
    ),
    ("sm_clock", "Hz", ("DCGM_FI_DEV_SM_CLOCK_HERTZ",)),
    ("mem_clock", "MHz", ("DCGM_FI_DEV_MEM_CLOCK", "dcgm_memory_clock", "clocks.mem")),
    ("mem_clock", "MHz", ("clocks.current.memory",)),
    ("mem_clock", "Hz", ("DCGM_FI_DEV_MEMORY_CLOCK_HERTZ",)),
    ("gr_clock", "MHz", ("clocks.gr", "clocks.current.graphics")),
    ("xid", "1", ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR", "dcgm_xid_errors")),
    (
        "gr_engine_active",
        "ratio",
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "dcgm_fi_prof_gr_engine_active"),
    ),
    ("gr_engine_active", "ratio", ("DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO",)),
    ("sm_active", "ratio", ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_UTIL_RATIO")),
    ("sm_occupancy", "ratio", ("DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_SM_OCCUPANCY_RATIO")),
    (
        "tensor_active",
        "ratio",
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_TENSOR_UTIL_RATIO"),
    ),
    ("tensor_active", "ratio", ("dcgm_fi_prof_pipe_tensor_active",)),
    ("dram_active", "ratio", ("DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_DRAM_UTIL_RATIO")),
    ("dram_active", "ratio", ("dcgm_fi_prof_dram_active",)),
    ("fp64_active", "ratio", ("DCGM_FI_PROF_PIPE_FP64_ACTIVE", "DCGM_FI_PROF_FP64_UTIL_RATIO")),
    ("fp32_active", "ratio", ("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "DCGM_FI_PROF_FP32_UTIL_RATIO")),
    ("fp16_active", "ratio", ("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "DCGM_FI_PROF_FP16_UTIL_RATIO")),
    ("pcie_tx", "B/s", ("DCGM_FI_PROF_PCIE_TX_BYTES", "dcgm_fi_prof_pcie_tx_bytes")),
    ("pcie_rx", "B/s", ("DCGM_FI_PROF_PCIE_RX_BYTES", "dcgm_fi_prof_pcie_rx_bytes")),
    # NVML's PCIe throughput sample, "KB/s" in NVML's docs (read as KiB/s)
    ("pcie_tx", "KiB/s", ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "dcgm_pcie_tx_throughput")),
    ("pcie_rx", "KiB/s", ("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "dcgm_pcie_rx_throughput")),
    ("pcie_tx_total", "B", ("DCGM_FI_PROF_PCIE_TX_BYTES_TOTAL",)),
    ("pcie_rx_total", "B", ("DCGM_FI_PROF_PCIE_RX_BYTES_TOTAL",)),
    ("pcie_replay", "1", ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_PCIE_REPLAY_TOTAL")),
    ("pcie_replay", "1", ("dcgm_pcie_replay_counter",)),
    ("nvlink_tx", "B/s", ("DCGM_FI_PROF_NVLINK_TX_BYTES",)),
    ("nvlink_rx", "B/s", ("DCGM_FI_PROF_NVLINK_RX_BYTES",)),
    ("nvlink_total", "MB/s", ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "dcgm_nvlink_bandwidth_total")),
    ("nvlink_total", "MB/s", ("DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL",)),
    ("nvlink_total", "B/s", ("DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND",)),
    ("ecc_sbe_vol", "1", ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "ecc.errors.corrected.volatile.total")),
    (
        "ecc_dbe_vol",
        "1",
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "ecc.errors.uncorrected.volatile.total"),
    ),
    ("ecc_sbe_agg", "1", ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "ecc.errors.corrected.aggregate.total")),
    (
        "ecc_dbe_agg",
        "1",
        ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "ecc.errors.uncorrected.aggregate.total"),
    ),
    ("retired_sbe", "1", ("DCGM_FI_DEV_RETIRED_SBE", "DCGM_FI_DEV_PAGE_RETIRED_SBE_TOTAL")),
    ("retired_sbe", "1", ("retired_pages.single_bit_ecc.count", "retired_pages.sbe")),
    ("retired_dbe", "1", ("DCGM_FI_DEV_RETIRED_DBE", "DCGM_FI_DEV_PAGE_RETIRED_DBE_TOTAL")),
    ("retired_dbe", "1", ("retired_pages.double_bit.count", "retired_pages.dbe")),
    ("retired_pending", "1", ("DCGM_FI_DEV_RETIRED_PENDING", "DCGM_FI_DEV_PAGE_RETIRED_PENDING")),
    ("retired_pending", "1", ("retired_pages.pending",)),
    ("remapped_rows_correctable", "1", ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",)),
    ("remapped_rows_correctable", "1", ("DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL",)),
    ("remapped_rows_correctable", "1", ("remapped_rows.correctable",)),
    ("remapped_rows_uncorrectable", "1", ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",)),
    ("remapped_rows_uncorrectable", "1", ("DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL",)),
    ("remapped_rows_uncorrectable", "1", ("remapped_rows.uncorrectable",)),
    ("row_remap_failure", "1", ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_ROW_REMAP_FAILED")),
    ("row_remap_failure", "1", ("remapped_rows.failure",)),
    ("fan_speed", "%", ("DCGM_FI_DEV_FAN_SPEED", "fan.speed")),
    ("fan_speed", "ratio", ("DCGM_FI_DEV_FAN_SPEED_RATIO",)),
    ("pstate", "1", ("pstate",)),
    ("pcie_link_gen", "1", ("DCGM_FI_DEV_PCIE_LINK_GEN", "pcie.link.gen.current")),
    ("pcie_link_width", "1", ("DCGM_FI_DEV_PCIE_LINK_WIDTH", "pcie.link.width.current")),
)

# Units whose int values stay far below 2**31, so DCGM's int32 blanks cannot be real readings
# (bytes, Hz, J and counters can legitimately pass 2147483632).
_NARROW_UNITS = frozenset({"%", "C", "W", "MHz", "MiB", "ratio", "1"})


@dataclass(frozen=True)
class FieldSpec:
    """How one source field becomes a canonical sample."""

    metric: str
    raw_unit: str | None
    factor: float
    known: bool
    narrow: bool  # int32 blank sentinels apply


def unit_factor(from_unit: str, to_unit: str) -> float:
    """Multiply a value in ``from_unit`` by this to get ``to_unit`` (ValueError if unrelated)."""
    try:
        dim_from, size_from = UNITS[from_unit]
        dim_to, size_to = UNITS[to_unit]
    except KeyError as exc:
        raise ValueError(f"unknown unit {exc.args[0]!r}") from None
    if dim_from != dim_to:
        raise ValueError(f"cannot convert {from_unit} to {to_unit}")
    return size_from / size_to


def _spec(metric: str, raw_unit: str) -> FieldSpec:
    canon = METRICS[metric]
    narrow = raw_unit in _NARROW_UNITS and canon.kind == "gauge"
    return FieldSpec(metric, raw_unit, unit_factor(raw_unit, canon.unit), True, narrow)


ALIASES: dict[str, FieldSpec] = {
    name.lower(): _spec(metric, unit) for metric, unit, names in _ALIASES for name in names
}


def resolve(raw_name: str) -> FieldSpec:
    """The spec of a source field (case-insensitive); an unknown field keeps its lower-cased name
    with ``known=False`` and no conversion. A ``_total`` suffix that a client library added to a
    counter (``DCGM_FI_DEV_PCIE_REPLAY_COUNTER_total``) is looked through."""
    key = raw_name.lower()
    spec = ALIASES.get(key)
    if spec is None and key.endswith("_total"):
        spec = ALIASES.get(key[:-6])
    return spec or FieldSpec(key, None, 1.0, False, True)


# DCGM's "no value" sentinels (dcgm_structs.h): BLANK, then +1 NOT_FOUND, +2 NOT_SUPPORTED,
# +3 NOT_PERMISSIONED. All int64 ones read as 2**63 once parsed as a float.
INT64_BLANK = 0x7FFFFFFFFFFFFFF0
INT32_BLANK = 0x7FFFFFF0
FP64_BLANK = 2.0**47
_INT64_BLANK_FLOAT = float(INT64_BLANK) - 2048.0
_FP64_BLANKS = frozenset(FP64_BLANK + i for i in range(4))


def is_blank(value: float, narrow: bool = True) -> bool:
    """True for a DCGM blank sentinel: int64 >= 0x7ffffffffffffff0, the fp64 ones (2**47 + 0..3),
    int32 0x7ffffff0..0x7fffffff where ``narrow`` (the field cannot reach 2**31 honestly), and
    any finite magnitude >= 1e300 (a DBL_MAX-style fill, never a reading). NaN and inf are not
    sentinels: they are kept as the values the source sent."""
    if not math.isfinite(value):
        return False
    if value >= _INT64_BLANK_FLOAT or value in _FP64_BLANKS or abs(value) >= 1e300:
        return True
    return narrow and INT32_BLANK <= value <= 0x7FFFFFFF and value.is_integer()


def convert(value: float, factor: float) -> float:
    """``value * factor``, rounded to 15 significant digits when scaled, so that 0.07 (ratio)
    reads 7.0 %, not 7.000000000000001."""
    if factor == 1.0 or not math.isfinite(value):
        return value
    return float(f"{value * factor:.15g}")


def out_of_range(metric: str, value: float | None) -> bool:
    """True for a converted value a canonical metric cannot take (a unit assumption is wrong)."""
    canon = METRICS.get(metric)
    if canon is None or value is None or not math.isfinite(value):
        return False
    slack = 0.05 * (canon.high or 1.0)
    if canon.low is not None and value < canon.low - slack:
        return True
    return canon.high is not None and value > canon.high + slack

"""``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`` output -> GPU samples.

With a header (``utilization.gpu [%], memory.used [MiB]``) the columns and units come from it;
without one, from ``columns`` (default :data:`QUERY_COLUMNS` when the row width matches). A unit
written in a cell (``45 %``, ``19818 MiB``, ``631.95 W``, ``1980 MHz``) or in the header wins over
the column's usual unit. ``[N/A]``, ``[Not Supported]``, ``[Insufficient Permissions]`` and any
other bracketed marker are ``None``. One sample per GPU per value column; ``-l``/``-lms`` loops
(many rows per GPU) give one sample per row.

Time: nvidia-smi's ``timestamp`` (``2026/07/14 08:12:38.696``) is the node's local wall clock
with no zone. It is read as local time at ``tz_offset_s`` seconds east of UTC (default 0: the
node runs UTC) and returned as unix seconds; without a timestamp column ``timestamp`` is None.
"""

from __future__ import annotations

import csv
import re
from datetime import UTC, datetime

from app.telemetry.dcgm import GpuIdentity, SampleBuilder
from app.telemetry.fields import METRICS, UNITS, unit_factor
from app.telemetry.samples import GpuSample, Scrape, TelemetryError

SOURCE = "nvidia-smi"

# What Runwatch asks for: fields present in every driver of the last years (an unknown field
# fails the whole query), identity first.
QUERY_COLUMNS: list[str] = [
    "timestamp",
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "utilization.gpu",
    "utilization.memory",
    "memory.used",
    "memory.free",
    "memory.total",
    "power.draw",
    "temperature.gpu",
    "clocks.sm",
    "clocks.mem",
    "pcie.link.gen.current",
    "pcie.link.width.current",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total",
]

_INDEX = ("index",)
_UUID = ("uuid", "gpu_uuid")
_MODEL = ("name", "gpu_name")
_LABEL_COLUMNS = {
    "pci.bus_id": "pci_bus_id",
    "gpu_bus_id": "pci_bus_id",
    "driver_version": "driver_version",
    "serial": "serial",
    "gpu_serial": "serial",
    "vbios_version": "vbios_version",
}
_IDENTITY = {"timestamp", "hostname", "count", *_INDEX, *_UUID, *_MODEL, *_LABEL_COLUMNS}
_HEADER_CELL = re.compile(r"[a-z_][a-zA-Z0-9_.]*(?: \[([^\]]*)\])?")
_NUMBER = re.compile(r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)(?:\s*(\S+))?")
_WORDS = {"enabled": 1.0, "active": 1.0, "yes": 1.0, "disabled": 0.0, "not active": 0.0, "no": 0.0}
_TIME_FORMATS = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S")


def parse_cell(cell: str) -> tuple[float | None, str | None]:
    """``"631.95 W"`` -> ``(631.95, "W")``; ``[N/A]`` and friends -> ``(None, None)``; hex,
    P-states (``P0`` -> 0) and Enabled/Disabled-style words too. ValueError for other text."""
    text = cell.strip()
    if not text or text == "N/A" or (text.startswith("[") and text.endswith("]")):
        return None, None
    if text[:2].lower() == "0x":
        return float(int(text, 16)), None
    m = _NUMBER.fullmatch(text)
    if m is not None:
        return float(m.group(1)), m.group(2)
    if text[0] == "P" and text[1:].isdigit():
        return float(text[1:]), None
    word = _WORDS.get(text.lower())
    if word is None:
        raise ValueError(f"not a number: {text!r}")
    return word, None


def parse_timestamp(text: str, tz_offset_s: float = 0.0) -> float:
    """nvidia-smi's zone-less local time -> unix seconds, for a node ``tz_offset_s`` east of UTC."""
    for fmt in _TIME_FORMATS:
        try:
            local = datetime.strptime(text.strip(), fmt)
        except ValueError:
            continue
        return local.replace(tzinfo=UTC).timestamp() - tz_offset_s
    raise ValueError(f"not an nvidia-smi timestamp: {text!r}")


def _header(cells: list[str]) -> tuple[list[str], list[str | None]] | None:
    matches = [_HEADER_CELL.fullmatch(c) for c in cells]
    if not all(matches):
        return None
    names = [c.split(" [", 1)[0] for c in cells]
    units = [m.group(1) if m else None for m in matches]
    return names, units


def parse_nvidia_smi_csv(
    text: str,
    *,
    host: str | None,
    columns: list[str] | None = None,
    tz_offset_s: float = 0.0,
) -> Scrape:
    """Every GPU sample in ``--query-gpu`` CSV output (see the module docstring)."""
    scrape = Scrape(samples=[], source=SOURCE)
    warn = scrape.warnings
    try:
        rows = [
            (n, cells)
            for n, cells in enumerate(csv.reader(text.splitlines(), skipinitialspace=True), 1)
            if cells and any(c.strip() for c in cells)
        ]
    except csv.Error as exc:  # a cell past csv's field limit, a stray quote ...
        raise TelemetryError(f"{SOURCE}: not readable as CSV ({exc})") from None
    if not rows:
        warn.append(f"{SOURCE}: empty output: no samples")
        return scrape
    names: list[str] | None = [c.strip() for c in columns] if columns else None
    units: list[str | None] = [None] * len(names) if names else []
    head = _header([c.strip() for c in rows[0][1]])
    header_cells: list[str] | None = None
    if head is not None:
        header_cells = rows[0][1]
        if names and names != head[0]:
            warn.append(f"{SOURCE}: header {head[0]} overrides the columns given")
        names, units = head
        rows = rows[1:]
    elif names is None:
        if len(rows[0][1]) != len(QUERY_COLUMNS):
            raise TelemetryError(
                f"{SOURCE}: line {rows[0][0]}: no header and no columns given, and"
                f" {len(rows[0][1])} cells do not match QUERY_COLUMNS: {','.join(rows[0][1])[:200]}"
            )
        names, units = list(QUERY_COLUMNS), [None] * len(QUERY_COLUMNS)
    lower = [n.lower() for n in names]
    pos = {n: i for i, n in enumerate(lower)}
    index_col = next((pos[c] for c in _INDEX if c in pos), None)
    uuid_col = next((pos[c] for c in _UUID if c in pos), None)
    model_col = next((pos[c] for c in _MODEL if c in pos), None)
    host_col = pos.get("hostname")
    time_col = pos.get("timestamp")
    labels_at = [(pos[c], label) for c, label in _LABEL_COLUMNS.items() if c in pos]
    values_at = [i for i, n in enumerate(lower) if n not in _IDENTITY]
    if index_col is None and uuid_col is None:
        warn.append(f"{SOURCE}: no index or uuid column: GPUs numbered by row order")
    builder = SampleBuilder(warn, SOURCE)
    bad_cells: set[str] = set()
    parsed_rows = 0
    for number, cells in rows:
        if cells == header_cells:
            continue  # a header repeated by a loop or concatenated outputs
        if len(cells) != len(names):
            warn.append(
                f"{SOURCE}: line {number}: {len(cells)} cells for {len(names)} columns:"
                f" {','.join(cells)[:120]!r}"
            )
            continue
        parsed_rows += 1
        ident = _identity(cells, host, index_col, uuid_col, model_col, host_col, labels_at)
        if index_col is None and uuid_col is None:
            ident = GpuIdentity(ident.host, None, parsed_rows - 1, ident.model, ident.labels)
        when = None
        if time_col is not None and cells[time_col].strip():
            try:
                when = parse_timestamp(cells[time_col], tz_offset_s)
            except ValueError as exc:
                warn.append(f"{SOURCE}: line {number}: {exc}")
        for i in values_at:
            column = lower[i]
            try:
                raw, unit = parse_cell(cells[i])
            except ValueError as exc:
                if column not in bad_cells:
                    bad_cells.add(column)
                    warn.append(f"{SOURCE}: line {number}: {column}: {exc}; kept as no value")
                raw, unit = None, None
            spec = builder.spec(column)
            factor = _factor(spec.metric, unit or units[i]) if spec.known else None
            if factor is None and unit and spec.known and column not in bad_cells:
                bad_cells.add(column)
                warn.append(
                    f"{SOURCE}: {column}: unit {unit!r} unexpected; read as {spec.raw_unit}"
                )
            value = builder.value(spec, column, raw, factor=factor, blanks=False)
            scrape.samples.append(
                GpuSample(
                    metric=spec.metric,
                    value=value,
                    host=ident.host,
                    gpu_uuid=ident.uuid,
                    gpu_index=ident.index,
                    model=ident.model,
                    labels=dict(ident.labels),
                    raw_name=names[i],
                    timestamp=when,
                    known=spec.known,
                )
            )
    if rows and not parsed_rows:
        raise TelemetryError(f"{SOURCE}: line {rows[0][0]}: no row matches the columns")
    return scrape


def _identity(
    cells: list[str],
    host: str | None,
    index_col: int | None,
    uuid_col: int | None,
    model_col: int | None,
    host_col: int | None,
    labels_at: list[tuple[int, str]],
) -> GpuIdentity:
    def text(col: int | None) -> str | None:
        if col is None:
            return None
        value = cells[col].strip()
        return None if not value or value.startswith("[") else value

    index = text(index_col)
    return GpuIdentity(
        host=host or text(host_col),
        uuid=text(uuid_col),
        index=int(index) if index and index.isascii() and index.isdigit() else None,
        model=text(model_col),
        labels={label: v for col, label in labels_at if (v := text(col))},
    )


def _factor(metric: str, unit: str | None) -> float | None:
    """The factor for a value written in ``unit``; None when there is no (usable) unit."""
    if unit is None or unit not in UNITS:
        return None
    try:
        return unit_factor(unit, METRICS[metric].unit)
    except ValueError:
        return None

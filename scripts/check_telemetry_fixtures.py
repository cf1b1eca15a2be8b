"""Parse every GPU telemetry capture in a folder and print what the parsers made of it.

    python -m scripts.check_telemetry_fixtures DIR [--host HOST] [--all]

The parser is chosen by suffix: ``.json`` the Prometheus API, ``.csv`` nvidia-smi, ``.prom``,
``.txt`` and ``.metrics`` dcgm-exporter text; Markdown is skipped and anything else is sniffed
(JSON if it opens with ``{``/``[``, else exposition text). Exit status 1 if any file fails.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from app.telemetry.dcgm import parse_dcgm
from app.telemetry.nvidia_smi import parse_nvidia_smi_csv
from app.telemetry.prometheus_api import parse_query_range
from app.telemetry.samples import GpuSample, Scrape, TelemetryError, series_key

SKIP = {".md", ".rst"}


def parse_file(path: Path, host: str) -> Scrape:
    text = path.read_text(encoding="utf-8", errors="replace")
    suffix = path.suffix.lower()
    if suffix == ".json" or (
        suffix not in {".csv", ".prom", ".txt", ".metrics"} and _is_json(text)
    ):
        return parse_query_range(text)
    if suffix == ".csv":
        return parse_nvidia_smi_csv(text, host=host)
    return parse_dcgm(text, host=host)


def _is_json(text: str) -> bool:
    return text.lstrip()[:1] in ("{", "[")


def _describe(sample: GpuSample) -> str:
    host, gpu, metric = series_key(sample)
    value = "None" if sample.value is None else f"{sample.value:.6g}"
    flag = "" if sample.known else " [unknown field]"
    labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
    when = "" if sample.timestamp is None else f" @{sample.timestamp:.3f}"
    return f"{host}|{gpu}|{metric} = {value}{when}  ({sample.raw_name}{flag}) {{{labels}}}"


def report(path: Path, scrape: Scrape, show_all: bool) -> None:
    samples = scrape.samples
    series = {series_key(s) for s in samples}
    missing = sum(s.value is None for s in samples)
    metrics = Counter(s.metric for s in samples)
    print(
        f"{path.name}: {scrape.source}: {len(samples)} samples, {len(series)} series,"
        f" {missing} without a value"
    )
    if metrics:
        print("  metrics: " + ", ".join(f"{m} x{n}" for m, n in sorted(metrics.items())))
    for sample in samples if show_all else samples[:12]:
        print("  " + _describe(sample))
    if not show_all and len(samples) > 12:
        print(f"  ... {len(samples) - 12} more (--all)")
    for warning in scrape.warnings:
        print(f"  warning: {warning}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--host", default="scrape-target", help="host for captures without one")
    parser.add_argument("--all", action="store_true", help="print every sample")
    args = parser.parse_args(argv)
    files = sorted(p for p in args.folder.iterdir() if p.is_file() and p.suffix.lower() not in SKIP)
    if not files:
        print(f"no capture in {args.folder}", file=sys.stderr)
        return 1
    failed = 0
    for path in files:
        try:
            scrape = parse_file(path, args.host)
        except (TelemetryError, OSError) as exc:
            failed += 1
            print(f"{path.name}: FAILED: {exc}")
            continue
        report(path, scrape, args.all)
    print(f"{len(files) - failed}/{len(files)} files parsed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

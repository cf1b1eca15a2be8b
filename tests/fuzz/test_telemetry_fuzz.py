"""Every telemetry parser on damaged and hostile input: samples (and warnings), or the parser's
documented error (:class:`TelemetryError`; ``SourceError`` for the agent's nvidia-smi reader),
never another exception and never a hang."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from app.telemetry.agent import render_metrics
from app.telemetry.dcgm import parse_dcgm
from app.telemetry.gpu_sources import GpuReading, SourceError, parse_smi_csv
from app.telemetry.nvidia_smi import parse_nvidia_smi_csv
from app.telemetry.prometheus_api import parse_query_range
from app.telemetry.prometheus_text import parse_text
from app.telemetry.samples import Scrape, TelemetryError
from tests.fuzz import harness
from tests.fuzz.mutate import json_values, mutated_bytes
from tests.telemetry.test_dcgm import CURRENT, NEW, OLD
from tests.telemetry.test_nvidia_smi import NO_HEADER_NO_UNITS, WITH_UNITS
from tests.telemetry.test_prometheus_api import MATRIX
from tests.telemetry.test_prometheus_text import BODY

AGENT = render_metrics(
    [
        GpuReading(
            index=0,
            uuid="GPU-aaaa",
            name="NVIDIA H100",
            pci_bus_id="00000000:18:00.0",
            driver_version="570.86",
            gpu_util=97.0,
            fb_used_mib=61440.0,
        )
    ],
    source="nvml",
    reason=None,
    gpus=1,
    scrape_errors=0,
    hostname="node-1",
    job="42",
)
SMI_AGENT = (
    "0, GPU-aaaa, NVIDIA H100, 00000000:18:00.0, 570.86, 97, 41, 61440, 20480, 81920,"
    " 650.5, 66, 1980, 2619\n"
)


def _check(name: str, parse: Callable[[], Any], errors: tuple[type[Exception], ...]) -> None:
    harness.TRIED[name] += 1
    try:
        with harness.time_bound():
            result = parse()
    except errors as exc:
        harness.OUTCOMES[name, "refused"] += 1
        assert str(exc), "an error without a message"
        return
    harness.OUTCOMES[name, "parsed"] += 1
    if isinstance(result, Scrape):
        for sample in result.samples:
            assert isinstance(sample.metric, str)
            assert sample.value is None or isinstance(sample.value, float)
            assert sample.timestamp is None or isinstance(sample.timestamp, float)
        assert all(isinstance(w, str) for w in result.warnings)


def texts(seeds: list[str]) -> st.SearchStrategy[str]:
    """A seed damaged at the byte and line level, read back as text."""
    return st.sampled_from(seeds).flatmap(
        lambda seed: mutated_bytes(seed.encode(), lines=True).map(
            lambda data: data.decode("utf-8", "replace")
        )
    )


EXPOSITION = [CURRENT, OLD, NEW, AGENT, BODY]


@harness.fuzz_settings()
@given(texts(EXPOSITION), st.one_of(st.none(), st.text(max_size=10)))
def test_dcgm_exporter_text(text: str, host: str | None) -> None:
    _check("telemetry:dcgm", lambda: parse_dcgm(text, host=host), (TelemetryError,))


@harness.fuzz_settings()
@given(st.one_of(texts(EXPOSITION), st.text()))
def test_prometheus_exposition_text(text: str) -> None:
    _check("telemetry:prometheus_text", lambda: parse_text(text), (TelemetryError,))


@harness.fuzz_settings()
@given(
    texts([WITH_UNITS, NO_HEADER_NO_UNITS]),
    st.one_of(st.none(), st.lists(st.text(max_size=12), max_size=12)),
    st.floats(allow_nan=True, allow_infinity=True),
)
def test_nvidia_smi_csv(text: str, columns: list[str] | None, offset: float) -> None:
    _check(
        "telemetry:nvidia_smi",
        lambda: parse_nvidia_smi_csv(text, host="n", columns=columns, tz_offset_s=offset),
        (TelemetryError,),
    )


@harness.fuzz_settings()
@given(texts([SMI_AGENT * 2]))
def test_agent_nvidia_smi_csv(text: str) -> None:
    _check("telemetry:agent_smi", lambda: parse_smi_csv(text), (SourceError,))


def _shaped(doc: Any, draw: st.DrawFn) -> Any:
    """The Prometheus answer with one value (at any depth) replaced by any JSON."""
    if isinstance(doc, dict) and doc and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(doc)))
        return {**doc, key: _shaped(doc[key], draw)}
    if isinstance(doc, list) and doc and draw(st.booleans()):
        at = draw(st.integers(0, len(doc) - 1))
        return [*doc[:at], _shaped(doc[at], draw), *doc[at + 1 :]]
    return draw(json_values())


@st.composite
def prometheus_answers(draw: st.DrawFn) -> str | dict[str, Any]:
    doc = json.loads(json.dumps(MATRIX))
    for _ in range(draw(st.integers(0, 3))):
        doc = _shaped(doc, draw)
    if draw(st.booleans()):
        return doc
    text = json.dumps(doc, allow_nan=True)
    if draw(st.integers(0, 3)) == 0:
        text = draw(mutated_bytes(text.encode())).decode("utf-8", "replace")
    if draw(st.integers(0, 7)) == 0:
        text = "[" * 100_000 + "]" * 100_000
    return text


@harness.fuzz_settings()
@given(prometheus_answers(), st.one_of(st.none(), st.text(max_size=8)))
def test_prometheus_api_answers(body: str | dict[str, Any], hint: str | None) -> None:
    _check(
        "telemetry:prometheus_api",
        lambda: parse_query_range(body, metric_hint=hint),
        (TelemetryError,),
    )


def test_seeds_parse() -> None:
    """The seeds themselves are valid input (so mutations start from something real)."""
    assert parse_dcgm(AGENT, host="n").samples
    assert parse_smi_csv(SMI_AGENT)[0].gpu_util == 97.0
    assert parse_query_range(MATRIX).samples
    assert parse_nvidia_smi_csv(WITH_UNITS, host="n").samples

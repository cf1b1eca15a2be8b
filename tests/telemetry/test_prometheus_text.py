"""The Prometheus text exposition parser, on bodies written from the format's documentation."""

from __future__ import annotations

import math
import time

import pytest

from app.telemetry.prometheus_text import family_of, parse_labels, parse_text
from app.telemetry.samples import TelemetryError

MSDOS = (
    'msdos_file_access_time_seconds{path="C:\\\\DIR\\\\FILE.TXT",'
    'error="Cannot find file:\\n\\"FILE.TXT\\""} 1.458255915e9'
)
BODY = """\
# HELP http_requests_total The total number of HTTP requests.
# TYPE http_requests_total counter
http_requests_total{method="post",code="200"} 1027 1395066363000
http_requests_total{method="post",code="400"}    3 1395066363000

# A comment that is neither HELP nor TYPE.
@MSDOS@
metric_without_timestamp_and_labels 12.47
something_weird{problem="division by zero"} +Inf -3982045
nan_value NaN
negative_inf -Inf
""".replace("@MSDOS@", MSDOS)


def test_documented_example_parses_exactly() -> None:
    parsed = parse_text(BODY)
    assert parsed.warnings == []
    assert parsed.types == {"http_requests_total": "counter"}
    assert parsed.helps["http_requests_total"] == "The total number of HTTP requests."
    names = [s[0] for s in parsed.samples]
    assert names == [
        "http_requests_total",
        "http_requests_total",
        "msdos_file_access_time_seconds",
        "metric_without_timestamp_and_labels",
        "something_weird",
        "nan_value",
        "negative_inf",
    ]
    first = parsed.samples[0]
    assert first[1] == {"method": "post", "code": "200"}
    assert first[2] == 1027.0
    assert first[3] == 1395066363.0  # milliseconds -> seconds
    assert parsed.samples[1][2] == 3.0
    escaped = parsed.samples[2][1]
    assert escaped == {"path": "C:\\DIR\\FILE.TXT", "error": 'Cannot find file:\n"FILE.TXT"'}
    assert parsed.samples[3] == ("metric_without_timestamp_and_labels", {}, 12.47, None)
    weird = parsed.samples[4]
    assert weird[2] == math.inf and weird[3] == -3982.045
    assert math.isnan(parsed.samples[5][2])
    assert parsed.samples[6][2] == -math.inf


def test_space_after_comma_crlf_and_trailing_comma() -> None:
    body = 'gpu_temp{gpu="0", UUID="GPU-1"} 41\r\ngpu_temp{gpu="1", UUID="GPU-2",} 43\r\n'
    parsed = parse_text(body)
    assert parsed.warnings == []
    assert [(s[1], s[2]) for s in parsed.samples] == [
        ({"gpu": "0", "UUID": "GPU-1"}, 41.0),
        ({"gpu": "1", "UUID": "GPU-2"}, 43.0),
    ]


def test_label_values_may_hold_braces_commas_and_equals() -> None:
    parsed = parse_text('x{msg="a}b, c=d {e}",k="v"} 1\n')
    assert parsed.samples == [("x", {"msg": "a}b, c=d {e}", "k": "v"}, 1.0, None)]


def test_empty_body_is_a_warning_not_an_error() -> None:
    for body in ("", "\n\n", "   \r\n"):
        parsed = parse_text(body, source="node-7")
        assert parsed.samples == []
        assert len(parsed.warnings) == 1 and "empty body" in parsed.warnings[0]
        assert parsed.warnings[0].startswith("node-7")


def test_comments_only_body_has_no_samples_and_no_error() -> None:
    parsed = parse_text("# HELP a b\n# TYPE a gauge\n")
    assert parsed.samples == [] and parsed.types == {"a": "gauge"}


def test_garbage_lines_are_warned_by_line_number_and_skipped() -> None:
    body = (
        'ok_one 1\nthis is not a sample line\nbad{a="1" 2\nok_two{a="x"} 2\nbad_value{a="1"} abc\n'
    )
    parsed = parse_text(body, source="dcgm")
    assert [s[0] for s in parsed.samples] == ["ok_one", "ok_two"]
    assert len(parsed.warnings) == 3
    assert parsed.warnings[0].startswith("dcgm: line 2:")
    assert parsed.warnings[1].startswith("dcgm: line 3:")
    assert parsed.warnings[2].startswith("dcgm: line 5:")


def test_bad_label_syntax_is_a_warning() -> None:
    parsed = parse_text('good 1\nx{a=unquoted} 1\ny{a="1" b="2"} 1\n')
    assert [s[0] for s in parsed.samples] == ["good"]
    assert [w.split(":")[1].strip() for w in parsed.warnings] == ["line 2", "line 3"]


def test_a_body_of_only_garbage_is_an_error() -> None:
    with pytest.raises(TelemetryError, match="no sample"):
        parse_text("<html><body>502 Bad Gateway</body></html>\n<p>nginx</p>\n")


def test_counter_total_suffix_maps_to_its_family() -> None:
    parsed = parse_text("# TYPE energy counter\nenergy_total 5\nenergy 6\nother_total 1\n")
    names = [s[0] for s in parsed.samples]
    assert names == ["energy_total", "energy", "other_total"]  # names as written
    assert [family_of(n, parsed.types) for n in names] == ["energy", "energy", "other_total"]


def test_parse_labels_rejects_what_is_not_labels() -> None:
    assert parse_labels('a="1", b = "2" ,') == {"a": "1", "b": "2"}
    with pytest.raises(ValueError):
        parse_labels('a="1" junk')


def test_long_garbage_line_does_not_backtrack() -> None:
    line = "x{" + 'a="' + "b" * 5000 + " " * 5000 + "\n"
    started = time.perf_counter()
    parsed = parse_text("ok 1\n" + line)
    assert time.perf_counter() - started < 0.5
    assert len(parsed.samples) == 1 and len(parsed.warnings) == 1

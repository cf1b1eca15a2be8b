"""A fast parser of the Prometheus text exposition format (version 0.0.4).

Yields ``(name, labels, value, timestamp)``: ``value`` a float (``NaN``, ``+Inf``, ``-Inf`` as
Python floats), ``timestamp`` the optional trailing one converted from milliseconds to seconds.
Tolerated: ``# HELP``/``# TYPE``/other comments, blank lines, CRLF, a space after the comma
between labels (old dcgm-exporter), escaped label values (``\\\\``, ``\\"``, ``\\n``), a trailing
comma, ``# EOF``. A line that is none of these is a warning naming its line number, and parsing
goes on; a body with lines but not one sample among them is a :class:`TelemetryError`. An empty
body (an exporter mid-reload answers 200 with nothing) gives no samples and a warning.

Counters: names are kept as written. An exporter may expose a ``counter`` family's sample as
``foo`` (dcgm-exporter) or ``foo_total`` (OpenMetrics style); :func:`family_of` maps either to
the family named by ``# TYPE``, and :attr:`ParsedText.types` holds the declared types.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from app.telemetry.samples import TelemetryError

RawSample = tuple[str, dict[str, str], float, float | None]

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_NAME_RE = re.compile(_NAME)
# Possessive quantifiers (Python 3.11+): a garbage label block cannot backtrack exponentially.
_QUOTED = r'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
_LABEL = re.compile(rf"[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*({_QUOTED})[ \t]*(,|$)")
_VALUES = {"NaN": float("nan"), "+Inf": float("inf"), "-Inf": float("-inf"), "Inf": float("inf")}
_ESCAPES = re.compile(r"\\(.)")
_TYPES = {"counter", "gauge", "histogram", "summary", "untyped", "unknown", "info", "stateset"}


@dataclass
class ParsedText:
    samples: list[RawSample] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)
    helps: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    bad_lines: int = 0  # lines that were neither a sample, a comment nor blank

    def check_not_garbage(self, source: str, *, found: int | None = None) -> None:
        """Raise when lines were rejected and none gave a sample: the body is not this format."""
        if self.bad_lines and not (len(self.samples) if found is None else found):
            first = next((w for w in self.warnings if ": line " in w), "")
            raise TelemetryError(f"{source}: no sample in {self.bad_lines} line(s); {first}")


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    return _ESCAPES.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), text)


def parse_labels(block: str) -> dict[str, str]:
    """``a="1", b="x\\"y"`` -> ``{"a": "1", "b": 'x"y'}``; ValueError if it is not that form."""
    labels: dict[str, str] = {}
    pos, end = 0, len(block)
    while pos < end:
        m = _LABEL.match(block, pos)
        if m is None:
            if block[pos:].strip():
                raise ValueError(f"bad label syntax near {block[pos : pos + 40]!r}")
            break
        labels[m.group(1)] = _unescape(m.group(2)[1:-1])
        pos = m.end()
        if not m.group(3):
            if block[pos:].strip():
                raise ValueError(f"missing comma near {block[pos : pos + 40]!r}")
            break
    return labels


def parse_value(token: str) -> float:
    special = _VALUES.get(token)
    return special if special is not None else float(token)


def iter_lines(
    text: str, state: ParsedText, *, source: str
) -> Iterator[tuple[int, str, str | None, float, float | None]]:
    """``(line_number, name, raw label block or None, value, timestamp_s)`` for each sample
    line; comments fill ``state.types``/``helps``, bad lines ``state.warnings``/``bad_lines``.

    The label block is returned unparsed so a caller can cache :func:`parse_labels` per block
    (one exporter scrape repeats each GPU's block once per field). The block runs from the first
    ``{`` to the last ``}``: a label value may hold a ``}``, a name or a number cannot."""
    if text.startswith("\ufeff"):
        text = text[1:]
    names: set[str] = set()
    for number, line in enumerate(text.split("\n"), 1):
        if not line or line[0] in " \t\r#":
            line = line.strip()
            if not line:
                continue
            if line[0] == "#":
                _comment(line, state.types, state.helps)
                continue
        brace = line.find("{")
        block: str | None = None
        if brace >= 0:
            close = line.rfind("}")
            name = line[:brace].rstrip()
            block = line[brace + 1 : close] if close > brace else None
            rest = line[close + 1 :].split() if close > brace else []
        else:
            rest = line.split()
            if not rest:
                continue  # blank but for whitespace other than spaces and tabs (\f, \x1c...)
            name = rest.pop(0)
        if not 1 <= len(rest) <= 2 or not (name in names or _valid_name(name, names)):
            state.bad_lines += 1
            state.warnings.append(f"{source}: line {number}: not a sample: {line[:120]!r}")
            continue
        try:
            value = parse_value(rest[0])
            ts = float(rest[1]) / 1000.0 if len(rest) == 2 else None
        except ValueError:
            state.bad_lines += 1
            state.warnings.append(f"{source}: line {number}: bad value in {line[:120]!r}")
            continue
        yield number, name, block, value, ts


def _valid_name(name: str, seen: set[str]) -> bool:
    if _NAME_RE.fullmatch(name) is None:
        return False
    seen.add(name)
    return True


def _comment(line: str, types: dict[str, str], helps: dict[str, str]) -> None:
    parts = line[1:].lstrip().split(None, 2)
    if len(parts) >= 2 and parts[0] in ("TYPE", "HELP"):
        rest = parts[2] if len(parts) == 3 else ""
        if parts[0] == "TYPE" and rest.strip() in _TYPES:
            types[parts[1]] = rest.strip()
        elif parts[0] == "HELP":
            helps[parts[1]] = _unescape(rest)


def family_of(name: str, types: dict[str, str]) -> str:
    """The metric family a sample belongs to: ``foo_total`` -> ``foo`` when ``foo`` is a declared
    counter; histogram/summary ``_bucket``/``_sum``/``_count`` likewise; else the name itself."""
    if name in types:
        return name
    for suffix in ("_total", "_bucket", "_sum", "_count", "_created"):
        if name.endswith(suffix) and name[: -len(suffix)] in types:
            return name[: -len(suffix)]
    return name


def parse_text(text: str, *, source: str = "prometheus text") -> ParsedText:
    """Every sample of an exposition body; see the module docstring for what is tolerated."""
    out = ParsedText()
    if not text.strip():
        out.warnings.append(f"{source}: empty body (exporter restarting?): no samples")
        return out
    cache: dict[str, dict[str, str]] = {}
    for number, name, block, value, ts in iter_lines(text, out, source=source):
        labels: dict[str, str] = {}
        if block:
            parsed = cache.get(block)
            if parsed is None:
                try:
                    parsed = cache[block] = parse_labels(block)
                except ValueError as exc:
                    out.bad_lines += 1
                    out.warnings.append(f"{source}: line {number}: {exc}")
                    continue
            labels = dict(parsed)
        out.samples.append((name, labels, value, ts))
    out.check_not_garbage(source)
    return out

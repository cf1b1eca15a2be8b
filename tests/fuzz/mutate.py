"""Hypothesis strategies that damage valid inputs the ways real files get damaged (a writer killed
mid-write, a disk error, a bad copy) and the ways a hostile upload would: truncation, flipped and
random bytes, splices, duplicated, dropped and reordered lines, steps going backwards, and values
swapped for NaN/Infinity, huge integers, the wrong JSON type, 10k-deep nesting or very long text.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

Source = dict[str, bytes]
DEEP = 10_000

# hostile JSON texts, written as text: json.dumps cannot write NaN-free infinities or deep nests
HOSTILE_TOKENS: list[bytes] = [
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1e999",
    b"-1e999",
    b"99999999999999999999999999999",
    b"-1",
    b"9223372036854775808",
    b"4611686018427387904",
    b"2147483648",
    b"1.5",
    b"0.0",
    b"null",
    b"true",
    b'"a string"',
    b'""',
    b'"\\u0000"',
    b'"\\ud800"',
    b"[]",
    b"{}",
    b'[1, "two", null]',
    b'{"nested": {"deeper": [1, 2]}}',
    b"[" * DEEP + b"]" * DEEP,
    b'{"a":' * 900 + b"1" + b"}" * 900,
    b'"' + b"x" * 200_000 + b'"',
]


def json_values(*, depth: int = 3) -> st.SearchStrategy[Any]:
    """Any JSON value, with the edge cases weighted in (big and negative integers, NaN and
    infinities, NUL and lone surrogates in strings)."""
    text = st.one_of(
        st.text(max_size=20),
        st.sampled_from(["", "\x00", "\ud800", "step", "loss", "../x", "é" * 5]),
    )
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.sampled_from([0, 1, -1, 2**31, 2**62, 2**63, 2**64, 10**30]),
        st.floats(allow_nan=True, allow_infinity=True),
        text,
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(text, inner, max_size=4)
        ),
        max_leaves=8 if depth else 1,
    )


def dump(value: Any) -> bytes:
    """JSON text as a logger writes it: NaN and infinities bare, as Python's json writes them."""
    return json.dumps(value, allow_nan=True).encode()


@st.composite
def mutated_bytes(draw: st.DrawFn, data: bytes, *, lines: bool = False) -> bytes:
    """``data`` damaged by one to four byte- (and, for text, line-) level changes."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        ops = [_truncate, _flip, _overwrite, _insert, _delete, _splice, _repeat]
        if lines:
            ops += [_line_dup, _line_drop, _line_swap, _line_reverse, _token, _token, _long_line]
            ops += [_odd_line]
        out = draw(st.sampled_from(ops))(draw, out)
    return bytes(out)


def _pos(draw: st.DrawFn, out: bytearray, *, end: bool = False) -> int:
    return draw(st.integers(0, len(out) if end else max(len(out) - 1, 0)))


def _truncate(draw: st.DrawFn, out: bytearray) -> bytearray:
    return out[: _pos(draw, out, end=True)]


def _flip(draw: st.DrawFn, out: bytearray) -> bytearray:
    if out:
        at = _pos(draw, out)
        out[at] ^= 1 << draw(st.integers(0, 7))
    return out


def _overwrite(draw: st.DrawFn, out: bytearray) -> bytearray:
    at = _pos(draw, out)
    junk = draw(st.binary(min_size=1, max_size=64))
    out[at : at + len(junk)] = junk
    return out


def _insert(draw: st.DrawFn, out: bytearray) -> bytearray:
    at = _pos(draw, out, end=True)
    out[at:at] = draw(st.binary(min_size=1, max_size=64))
    return out


def _delete(draw: st.DrawFn, out: bytearray) -> bytearray:
    at = _pos(draw, out)
    del out[at : at + draw(st.integers(1, 256))]
    return out


def _splice(draw: st.DrawFn, out: bytearray) -> bytearray:
    """A stretch of the input copied over another place (a bad copy, an appended fragment)."""
    if len(out) < 2:
        return out
    a, b = sorted((_pos(draw, out), _pos(draw, out)))
    at = _pos(draw, out, end=True)
    out[at:at] = out[a : b + 1][:4096]
    return out


def _repeat(draw: st.DrawFn, out: bytearray) -> bytearray:
    """The whole input twice (a log appended again after a restart)."""
    return out + out if len(out) < 1 << 20 else out


def _split(out: bytearray) -> list[bytes]:
    return bytes(out).split(b"\n")


def _line_dup(draw: st.DrawFn, out: bytearray) -> bytearray:
    lines = _split(out)
    at = draw(st.integers(0, len(lines) - 1))
    lines[at:at] = [lines[at]] * draw(st.integers(1, 3))
    return bytearray(b"\n".join(lines))


def _line_drop(draw: st.DrawFn, out: bytearray) -> bytearray:
    lines = _split(out)
    del lines[draw(st.integers(0, len(lines) - 1))]
    return bytearray(b"\n".join(lines))


def _line_swap(draw: st.DrawFn, out: bytearray) -> bytearray:
    lines = _split(out)
    a, b = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
    lines[a], lines[b] = lines[b], lines[a]
    return bytearray(b"\n".join(lines))


def _line_reverse(draw: st.DrawFn, out: bytearray) -> bytearray:
    """Steps going backwards: a stretch of lines in reverse order."""
    lines = _split(out)
    a, b = sorted((draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))))
    lines[a : b + 1] = lines[a : b + 1][::-1]
    return bytearray(b"\n".join(lines))


def _token(draw: st.DrawFn, out: bytearray) -> bytearray:
    """A value (or key) of a JSON line, or a number in a text line, swapped for a hostile one."""
    lines = _split(out)
    at = draw(st.integers(0, len(lines) - 1))
    line = lines[at]
    spots = [i for i, c in enumerate(line) if c in b":[,"] or [len(line)]
    start = draw(st.sampled_from(spots)) + 1
    end = start
    while end < len(line) and line[end] not in b",}]|\n":
        end += 1
    token = draw(st.one_of(st.sampled_from(HOSTILE_TOKENS), json_values().map(dump)))
    if draw(st.booleans()) and start < len(line) and line[start:end].strip().startswith(b'"'):
        token = b'"' + token.replace(b'"', b"'")[:40] + b'"'  # a key or string value instead
    lines[at] = line[:start] + b" " + token + line[end:]
    return bytearray(b"\n".join(lines))


ODD_TEXT = ["\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\xa0", "\r", "\ufeff", "\x00", "\\"]


def _odd_line(draw: st.DrawFn, out: bytearray) -> bytearray:
    """A line of odd whitespace and control characters (blank to some parsers, not others)."""
    lines = _split(out)
    text = "".join(draw(st.lists(st.sampled_from(ODD_TEXT), min_size=1, max_size=3)))
    lines.insert(draw(st.integers(0, len(lines))), text.encode())
    return bytearray(b"\n".join(lines))


def _long_line(draw: st.DrawFn, out: bytearray) -> bytearray:
    lines = _split(out)
    at = draw(st.integers(0, len(lines)))
    size = draw(st.sampled_from([1 << 16, (1 << 20) - 1, (1 << 20) + 1, 3 << 20]))
    filler = draw(st.sampled_from([b"x", b" ", b"[", b"\x00", b"1,"]))
    lines[at:at] = [(filler * size)[:size]]
    return bytearray(b"\n".join(lines))


@st.composite
def mutated_source(
    draw: st.DrawFn, seeds: list[Source], *, text: tuple[str, ...] = (".jsonl",)
) -> Source:
    """One seed with one or two of its files damaged (and sometimes one dropped)."""
    source = dict(draw(st.sampled_from(seeds)))
    paths = sorted(source)
    for _ in range(draw(st.integers(1, 2))):
        path = draw(st.sampled_from(paths))
        source[path] = draw(mutated_bytes(source[path], lines=path.endswith(text)))
    if len(paths) > 1 and draw(st.integers(0, 9)) == 0:
        del source[draw(st.sampled_from(paths))]
    return source

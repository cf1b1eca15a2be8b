"""JSON Lines with bounded memory and errors that name the file and line."""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import IO, Any

import orjson

from app.ingest.errors import IngestError, Warnings

BLOCK = 1 << 20
_DICT_ONLY = {dict}


def iter_lines(
    stream: IO[bytes],
    file: str,
    *,
    max_line_bytes: int,
    on_bytes: Callable[[int], None] | None = None,
    first_line: int = 1,
) -> Iterator[tuple[int, bytes, bool]]:
    """Yield ``(line_number, line, ended_with_newline)``; no line exceeds ``max_line_bytes``.
    ``first_line``: the number of the stream's first line (a part of a file starts mid-way)."""
    lineno = first_line - 1
    rest = b""
    while True:
        block = stream.read(BLOCK)
        if not block:
            break
        if on_bytes is not None:
            on_bytes(len(block))
        data = rest + block if rest else block
        lines = data.split(b"\n")
        rest = lines.pop()
        for line in lines:
            lineno += 1
            if len(line) > max_line_bytes:
                raise IngestError(
                    f"line longer than {max_line_bytes} bytes", file=file, line=lineno
                )
            yield lineno, line, True
        if len(rest) > max_line_bytes:
            raise IngestError(
                f"line longer than {max_line_bytes} bytes", file=file, line=lineno + 1
            )
    if rest:
        yield lineno + 1, rest, False


def iter_line_blocks(
    stream: IO[bytes],
    file: str,
    *,
    max_line_bytes: int,
    on_bytes: Callable[[int], None] | None = None,
) -> Iterator[tuple[int, list[bytes], bool]]:
    """:func:`iter_lines` a read block at a time: ``(first line number, lines, all ended with a
    newline)``. The same lines, numbers and errors, raised after the lines before them."""
    lineno = 0
    rest = b""
    while True:
        block = stream.read(BLOCK)
        if not block:
            break
        if on_bytes is not None:
            on_bytes(len(block))
        data = rest + block if rest else block
        lines = data.split(b"\n")
        rest = lines.pop()
        if lines and max(map(len, lines)) > max_line_bytes:
            long = next(i for i, line in enumerate(lines) if len(line) > max_line_bytes)
            if long:
                yield lineno + 1, lines[:long], True
            raise IngestError(
                f"line longer than {max_line_bytes} bytes", file=file, line=lineno + long + 1
            )
        if lines:
            yield lineno + 1, lines, True
        lineno += len(lines)
        if len(rest) > max_line_bytes:
            raise IngestError(
                f"line longer than {max_line_bytes} bytes", file=file, line=lineno + 1
            )
    if rest:
        yield lineno + 1, [rest], False


def parse_json(line: bytes) -> Any:
    """Strict JSON fast; fall back to Python's parser, which also reads bare NaN/Infinity."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return json.loads(line)


def iter_json_objects(
    stream: IO[bytes],
    file: str,
    warnings: Warnings,
    *,
    max_line_bytes: int,
    on_bytes: Callable[[int], None] | None = None,
    first_line: int = 1,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line.

    A last line cut off mid-write (no newline, not parseable) is what a crashed or still-running
    writer leaves behind: it is skipped with a warning. Any other bad line is an error.
    """
    for lineno, raw, complete in iter_lines(
        stream, file, max_line_bytes=max_line_bytes, on_bytes=on_bytes, first_line=first_line
    ):
        line = raw.strip()
        if not line:
            continue
        try:
            obj = parse_json(line)
        except (ValueError, RecursionError) as exc:
            if not complete:
                warnings.add(
                    f"{file} line {lineno}: truncated last line (no newline at end of file),"
                    " skipped"
                )
                return
            raise IngestError(f"not valid JSON ({_short(exc)})", file=file, line=lineno) from None
        if not isinstance(obj, dict):
            raise IngestError(
                f"expected a JSON object, got {type(obj).__name__}", file=file, line=lineno
            )
        yield lineno, obj


def iter_json_blocks(
    stream: IO[bytes],
    file: str,
    warnings: Warnings,
    *,
    max_line_bytes: int,
    on_bytes: Callable[[int], None] | None = None,
) -> Iterator[tuple[Sequence[int], list[dict[str, Any]]]]:
    """:func:`iter_json_objects` a block at a time: ``(line numbers, objects)``, the same objects,
    warnings and errors (an error is raised after the block of good lines before it).

    A block of strict JSON objects, one a line, is parsed in one pass; any other block (blank
    lines, bare NaN, a bad or cut-off line) goes line by line exactly as the per-line reader."""
    for first, lines, complete in iter_line_blocks(
        stream, file, max_line_bytes=max_line_bytes, on_bytes=on_bytes
    ):
        try:
            objs: list[Any] = list(map(orjson.loads, lines))
        except orjson.JSONDecodeError:
            pass
        else:
            if set(map(type, objs)) == _DICT_ONLY:
                yield range(first, first + len(lines)), objs
                continue
        numbers: list[int] = []
        objs = []
        for lineno, raw in enumerate(lines, first):
            line = raw.strip()
            if not line:
                continue
            try:
                obj = parse_json(line)
            except (ValueError, RecursionError) as exc:
                if numbers:
                    yield numbers, objs
                if not complete:
                    warnings.add(
                        f"{file} line {lineno}: truncated last line (no newline at end of file),"
                        " skipped"
                    )
                    return
                raise IngestError(
                    f"not valid JSON ({_short(exc)})", file=file, line=lineno
                ) from None
            if not isinstance(obj, dict):
                if numbers:
                    yield numbers, objs
                raise IngestError(
                    f"expected a JSON object, got {type(obj).__name__}", file=file, line=lineno
                )
            numbers.append(lineno)
            objs.append(obj)
        if numbers:
            yield numbers, objs


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block: parsing a log creates millions of small
    acyclic objects, and collections triggered by them only cost time. Restored on exit."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= 200 else text[:200] + "..."

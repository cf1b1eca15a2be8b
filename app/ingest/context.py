"""What every reader gets: the source tree, the alias table, warnings, limits and progress."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any

from app.ingest.aliases import AliasTable
from app.ingest.errors import IngestError, Warnings
from app.ingest.jsonl import iter_json_blocks, iter_json_objects, parse_json
from app.ingest.records import SampleTrace
from app.ingest.source import READ_ERRORS, SourceTree

MAX_JSON_DOC_BYTES = 16 << 20


@dataclass
class ReadContext:
    tree: SourceTree
    aliases: AliasTable
    warnings: Warnings
    max_line_bytes: int
    on_bytes: Callable[[int], None] | None = None
    samples: dict[str, SampleTrace] = field(default_factory=dict)
    """Sample traces already parsed from files of the source, by path (a large trace is parsed
    in parts by several workers; ``app.services.ingest_parts``)."""

    @contextmanager
    def open(self, path: str) -> Iterator[IO[bytes]]:
        """Open a file of the source; archive damage becomes an error naming the file."""
        try:
            with self.tree.open(path) as stream:
                yield stream
        except READ_ERRORS as exc:
            raise IngestError(f"could not be read ({exc})", file=path) from None

    def objects(
        self, path: str, stream: IO[bytes], first_line: int = 1
    ) -> Iterator[tuple[int, dict[str, Any]]]:
        """``(line number, object)`` for each line of a JSON Lines file (or of a part of one
        starting at line ``first_line``)."""
        return iter_json_objects(
            stream,
            path,
            self.warnings,
            max_line_bytes=self.max_line_bytes,
            on_bytes=self.on_bytes,
            first_line=first_line,
        )

    def blocks(
        self, path: str, stream: IO[bytes]
    ) -> Iterator[tuple[Sequence[int], list[dict[str, Any]]]]:
        """The same, a read block at a time: ``(line numbers, objects)``."""
        return iter_json_blocks(
            stream, path, self.warnings, max_line_bytes=self.max_line_bytes, on_bytes=self.on_bytes
        )

    def read_bytes(self, path: str, limit: int = MAX_JSON_DOC_BYTES) -> bytes:
        size = self.tree.sizes.get(path, 0)
        if size > limit:
            raise IngestError(f"{size} bytes; this file is limited to {limit} bytes", file=path)
        with self.open(path) as stream:
            raw = stream.read(limit + 1)
        if len(raw) > limit:
            raise IngestError(f"larger than its limit of {limit} bytes", file=path)
        if self.on_bytes is not None:
            self.on_bytes(len(raw))
        return raw

    def json_doc(self, path: str) -> dict[str, Any]:
        """A whole-file JSON object (bare NaN/Infinity accepted)."""
        raw = self.read_bytes(path)
        try:
            doc = parse_json(raw)
        except (ValueError, RecursionError) as exc:
            raise IngestError(f"not valid JSON ({exc})", file=path) from None
        if not isinstance(doc, dict):
            raise IngestError(f"expected a JSON object, got {type(doc).__name__}", file=path)
        return doc

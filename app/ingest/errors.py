"""Ingest errors that name the file and line a user has to look at."""

from __future__ import annotations

import re

MAX_MESSAGE = 600  # characters of an error or warning message (a hostile key can be megabytes)
MAX_FILE = 300  # characters of a file name in an error
_UNSAFE = re.compile("[\x00\ud800-\udfff]")


def printable(text: str, limit: int | None = None) -> str:
    """``text`` as a database stores and shows it: NUL characters and lone surrogates (which
    PostgreSQL refuses, and UTF-8 cannot encode) as U+FFFD, at most ``limit`` characters."""
    if not text.isascii() or "\x00" in text:
        text = _UNSAFE.sub("\ufffd", text)
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "\u2026"


class IngestError(Exception):
    """Bad input. ``str()`` reads ``<file> line <n>: <message>``."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None) -> None:
        message = printable(message, MAX_MESSAGE)
        super().__init__(message)
        self.message = message
        self.file = None if file is None else printable(file, MAX_FILE)
        self.line = line

    def __str__(self) -> str:
        where = self.file or ""
        if self.line is not None:
            where = f"{where} line {self.line}" if where else f"line {self.line}"
        return f"{where}: {self.message}" if where else self.message


class Warnings:
    """Collects non-fatal problems; repeats of one kind are counted, not listed one by one."""

    def __init__(self, limit_per_kind: int = 5) -> None:
        self.items: list[str] = []
        self._counts: dict[str, int] = {}
        self._limit = limit_per_kind

    def add(self, message: str, *, kind: str | None = None) -> None:
        message = printable(message, MAX_MESSAGE)
        kind = kind or message
        n = self._counts.get(kind, 0) + 1
        self._counts[kind] = n
        if n <= self._limit:
            self.items.append(message)

    def summary(self) -> list[str]:
        extra = [
            f"... and {n - self._limit} more like: {kind}"
            for kind, n in self._counts.items()
            if n > self._limit
        ]
        return self.items + extra

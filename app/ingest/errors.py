"""Ingest errors that name the file and line a user has to look at."""

from __future__ import annotations


class IngestError(Exception):
    """Bad input. ``str()`` reads ``<file> line <n>: <message>``."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
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

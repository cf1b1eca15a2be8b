"""Recently checked tokens, so a burst of API calls does not look its token up every time.

A live token's caller is remembered for ``ttl_s`` seconds (default ``TTL_S``), keyed by the
SHA-256 digest of its secret, in this process only. A token revoked meanwhile is therefore still
accepted for at most ``ttl_s`` seconds by a process that saw it just before; unknown and revoked
tokens are never remembered, so they are refused at once. ``ttl_s`` 0 turns the cache off.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from app.services.tokens import digest

TTL_S = 5.0
MAX_ENTRIES = 1024

T = TypeVar("T")


class TokenCache(Generic[T]):
    def __init__(
        self,
        ttl_s: float = TTL_S,
        max_entries: int = MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.clock = clock
        self._entries: dict[str, tuple[float, T]] = {}
        self._lock = threading.Lock()

    def get(self, secret: str) -> T | None:
        """The caller remembered for ``secret``; None when unknown or expired."""
        if self.ttl_s <= 0:
            return None
        entry = self._entries.get(digest(secret))
        if entry is None or entry[0] <= self.clock():
            return None
        return entry[1]

    def put(self, secret: str, value: T) -> None:
        if self.ttl_s <= 0:
            return
        now = self.clock()
        with self._lock:
            if len(self._entries) >= self.max_entries:
                self._entries = {k: e for k, e in self._entries.items() if e[0] > now}
                while len(self._entries) >= self.max_entries:  # all live: drop the oldest
                    del self._entries[next(iter(self._entries))]
            self._entries[digest(secret)] = (now + self.ttl_s, value)

    def clear(self) -> None:
        with self._lock:
            self._entries = {}

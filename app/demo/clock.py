"""A simulated wall clock: real elapsed compute time plus injected delays."""

from __future__ import annotations

import time


class SimClock:
    def __init__(self, start: float) -> None:
        self._start = start
        self._origin = time.perf_counter()
        self._injected = 0.0

    def now(self) -> float:
        """Unix seconds; never decreases."""
        return self._start + (time.perf_counter() - self._origin) + self._injected

    def sleep(self, seconds: float) -> None:
        """Let ``seconds`` pass without computing anything (downtime, a slow write)."""
        self._injected += max(seconds, 0.0)

    def wait_until(self, when: float) -> None:
        self.sleep(when - self.now())

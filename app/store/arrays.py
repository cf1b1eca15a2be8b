"""Little-endian array blobs and the chunking used for metric points and sample ids."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

INT64 = "<i8"
INT32 = "<i4"
FLOAT64 = "<f8"
UINT16 = "<u2"


def pack(array: np.ndarray, dtype: str) -> bytes:
    return np.ascontiguousarray(array, dtype=np.dtype(dtype)).tobytes()


def unpack(blob: bytes, dtype: str) -> np.ndarray:
    return np.frombuffer(blob, dtype=np.dtype(dtype))


def id_dtype(ids: np.ndarray) -> str:
    """The narrowest of int32/int64 that holds every id."""
    if ids.size == 0 or int(ids.max()) < 2**31:
        return INT32
    return INT64


def pack_points(steps: np.ndarray, values: np.ndarray, segments: np.ndarray) -> bytes:
    """Steps (int64), values (float64) and segment ordinals (uint16) of n points, in one blob."""
    return pack(steps, INT64) + pack(values, FLOAT64) + pack(segments, UINT16)


def unpack_points(blob: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = len(blob) // 18
    return (
        unpack(blob[: 8 * n], INT64),
        unpack(blob[8 * n : 16 * n], FLOAT64),
        unpack(blob[16 * n :], UINT16),
    )


def chunk_ranges(n: int, size: int) -> Iterator[tuple[int, int]]:
    for lo in range(0, n, size):
        yield lo, min(lo + size, n)


def step_chunks(counts: np.ndarray, max_ids: int, max_steps: int) -> Iterator[tuple[int, int]]:
    """Step ranges ``[lo, hi)`` holding at most ``max_ids`` ids (or one step) and ``max_steps``."""
    n = counts.size
    if n == 0:
        return
    ends = np.cumsum(counts)
    lo = 0
    while lo < n:
        base = int(ends[lo - 1]) if lo else 0
        hi = int(np.searchsorted(ends, base + max_ids, side="right"))
        hi = min(max(hi, lo + 1), lo + max_steps, n)
        yield lo, hi
        lo = hi

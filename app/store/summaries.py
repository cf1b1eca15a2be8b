"""Epoch summaries (``app.analysis.coverage_parts``) as one compact blob: an ``.npz`` of plain
arrays (no pickles). The bitmaps, mostly zeros, are deflated at level 1 (fast; the ids of an
order head would not compress); the head is narrowed to int32 when its ids fit.
"""

from __future__ import annotations

import io
import zlib

import numpy as np

from app.analysis.coverage import EpochCoverage
from app.analysis.coverage_parts import EpochSummary
from app.store.arrays import id_dtype

STATS = (
    "epoch",
    "first_step",
    "last_step",
    "steps_logged",
    "complete",
    "samples",
    "unseen",
    "repeated",
    "extra",
)


def encode_summaries(summaries: list[EpochSummary]) -> bytes:
    arrays: dict[str, np.ndarray] = {
        "stats": np.array(
            [[int(getattr(s.coverage, name)) for name in STATS] for s in summaries],
            dtype=np.int64,
        ).reshape(len(summaries), len(STATS))
    }
    for i, s in enumerate(summaries):
        arrays[f"grid_{i}"] = np.stack(s.grid)
        arrays[f"unseen_{i}"] = _deflate(s.unseen)
        arrays[f"repeated_{i}"] = _deflate(s.repeated)
        arrays[f"head_{i}"] = s.head.astype(id_dtype(s.head))
    out = io.BytesIO()
    np.savez(out, **arrays)  # type: ignore[arg-type]
    return out.getvalue()


def decode_summaries(blob: bytes) -> list[EpochSummary]:
    with np.load(io.BytesIO(blob), allow_pickle=False) as data:
        stats = data["stats"]
        out = []
        for i, row in enumerate(stats.tolist()):
            fields = dict(zip(STATS, row, strict=True))
            fields["complete"] = bool(fields["complete"])
            grid = data[f"grid_{i}"]
            out.append(
                EpochSummary(
                    coverage=EpochCoverage(**fields),
                    grid=(grid[0], grid[1], grid[2]),
                    unseen=_inflate(data[f"unseen_{i}"]),
                    repeated=_inflate(data[f"repeated_{i}"]),
                    head=data[f"head_{i}"].astype(np.int64),
                )
            )
        return out


def _deflate(bits: np.ndarray) -> np.ndarray:
    return np.frombuffer(zlib.compress(bits.tobytes(), 1), dtype=np.uint8)


def _inflate(blob: np.ndarray) -> np.ndarray:
    return np.frombuffer(zlib.decompress(blob.tobytes()), dtype=np.uint8)

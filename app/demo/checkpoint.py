"""Checkpoint serialization and the store that outlives a crashed process.

Each component is serialized for real (``np.savez`` or JSON bytes) and kept as bytes; a resume
rebuilds every object from those bytes. Only the manifest and the loader's ``sampler.json`` are
written into the run directory: the manifests are the record Runwatch reads.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

COMPONENT_FILES = {
    "model": "model.npz",
    "optimizer": "optimizer.npz",
    "scheduler": "scheduler.json",
    "rng": "rng.json",
    "dataloader": "sampler.json",
}
WRITTEN_COMPONENTS = ("dataloader",)


def checkpoint_name(step: int) -> str:
    return f"step_{step:06d}"


def pack_arrays(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


def unpack_arrays(blob: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(blob)) as archive:
        return {name: archive[name] for name in archive.files}


def pack_json(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def unpack_json(blob: bytes) -> Any:
    return json.loads(blob)


@dataclass(frozen=True)
class SavedCheckpoint:
    name: str
    step: int
    blobs: dict[str, bytes]  # component -> serialized state
    manifest: dict[str, Any]


class CheckpointStore:
    """Checkpoints by step: the only training state that survives a process exit."""

    def __init__(self) -> None:
        self._saved: dict[int, SavedCheckpoint] = {}

    def put(self, checkpoint: SavedCheckpoint) -> None:
        self._saved[checkpoint.step] = checkpoint

    def get(self, step: int) -> SavedCheckpoint:
        try:
            return self._saved[step]
        except KeyError:
            raise ValueError(f"no checkpoint at step {step} to resume from") from None

    def steps(self) -> list[int]:
        return sorted(self._saved)

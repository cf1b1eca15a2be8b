"""Checkpoint folders of a Hugging Face Trainer run as checkpoint records.

Every ``checkpoint-*`` folder becomes a checkpoint; its components are the state files present
(optimizer, scheduler, RNG, scaler, weights; DeepSpeed and FSDP sub-folders included).

The Trainer keeps no loader state: a resume re-derives the data position from ``global_step``,
skipping ``global_step % steps_per_epoch`` optimizer steps x ``gradient_accumulation_steps``
batches of the resumed epoch (none with ``ignore_data_skip``). A checkpoint's consumed samples are
therefore ``global_step`` x ``train_batch_size`` x gradient accumulation x processes, with the
accumulation read from ``training_args.bin`` (its pickle opcodes, never unpickled) and the process
count from the ``rng_state_<rank>.pth`` files. A short last batch or a last partial accumulation
of an epoch makes this an upper bound.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

from app.ingest.context import ReadContext
from app.ingest.hf_history import State, finite
from app.ingest.pickle_scan import pickled_scalars
from app.ingest.records import CheckpointRecord, ComponentRecord

FORMAT = "hf_trainer"  # the reader's name, and the source its checkpoint manifests name
MAX_ARGS_BYTES = 1 << 20
CHECKPOINT_DIR = re.compile(r"checkpoint-\d+")

_RNG_FILE = re.compile(r"rng_state(?:_(\d+))?\.pth")
_CHECKPOINT_FILES = ("optimizer.pt", "scheduler.pt", "rng_state.pth", "scaler.pt")
_ARGS_KEYS = ("gradient_accumulation_steps", "seed", "data_seed", "ignore_data_skip")
_INT64 = 1 << 63


def checkpoint_record(ctx: ReadContext, files: set[str], state: State) -> CheckpointRecord:
    """The checkpoint a ``checkpoint-*`` folder holds; ``files`` are all files of the source."""
    prefix = f"{state.folder}/" if state.folder else ""
    inside = {
        f[len(prefix) :]: ctx.tree.sizes[f]
        for f in files
        if f.startswith(prefix) and f != state.path
    }
    ranks = [m for m in (_RNG_FILE.fullmatch(r) for r in inside) if m]
    world = max(1, sum(1 for m in ranks if m.group(1) is not None)) if ranks else None
    args = _training_args(ctx, files, prefix + "training_args.bin")
    accumulation = args.get("gradient_accumulation_steps")
    accumulation = accumulation if type(accumulation) is int and accumulation > 0 else None
    per_device = state.doc.get("train_batch_size")
    batch = None
    if type(per_device) is int and per_device > 0:
        batch = per_device * (accumulation or 1) * (world or 1)
        if accumulation is None or world is None:
            ctx.warnings.add(
                f"{state.name}: consumed samples assume no gradient accumulation and one"
                " process where training_args.bin or rng_state files do not say",
                kind="hf-batch",
            )
    epoch = finite(state.doc.get("epoch"))
    seed = args.get("data_seed") if type(args.get("data_seed")) is int else args.get("seed")
    return CheckpointRecord(
        name=state.name,
        step=state.step,
        consumed_samples=None if batch is None else state.step * batch,
        epoch=None if epoch is None else math.floor(epoch),
        seed=seed if type(seed) is int else None,
        global_batch_size=batch,
        components=_components(inside),
        manifest=jsonable(
            {
                "source": FORMAT,
                "folder": state.folder,
                "global_step": state.step,
                "epoch": epoch,
                "max_steps": state.doc.get("max_steps"),
                "train_batch_size": per_device,
                "world_size": world,
                "training_args": args,
            }
        ),
    )


def _training_args(ctx: ReadContext, files: set[str], path: str) -> dict[str, Any]:
    if path not in files or ctx.tree.sizes[path] > MAX_ARGS_BYTES:
        return {}
    with ctx.open(path) as stream:
        return pickled_scalars(stream, _ARGS_KEYS, limit=MAX_ARGS_BYTES)


def _components(inside: dict[str, int]) -> dict[str, ComponentRecord]:
    grouped: dict[str, list[tuple[str, int]]] = {}
    for rel, size in sorted(inside.items()):
        kind = _component_of(rel)
        if kind is not None:
            grouped.setdefault(kind, []).append((rel, size))
    out = {
        kind: ComponentRecord(file=parts[0][0], bytes=sum(size for _, size in parts))
        for kind, parts in grouped.items()
    }
    states = sorted(r for r in inside if r.endswith("model_states.pt"))
    if "scheduler" not in out and states:
        out["scheduler"] = ComponentRecord(states[0], None)  # inside DeepSpeed's model states
    return out


def _component_of(rel: str) -> str | None:
    """Which checkpoint component a file inside a checkpoint folder holds (DeepSpeed and FSDP
    sub-folders included)."""
    name = rel.rsplit("/", 1)[-1]
    top = rel.split("/", 1)[0]
    if name == "scheduler.pt":
        return "scheduler"
    if name == "scaler.pt":
        return "scaler"
    if _RNG_FILE.fullmatch(name):
        return "rng"
    if name == "optimizer.pt" or name.endswith(("-optimizer.pt", "optim_states.pt")):
        return "optimizer"
    if top.startswith("optimizer_") and "/" in rel:
        return "optimizer"
    if name.endswith("model_states.pt") or (top.startswith("pytorch_model_fsdp") and "/" in rel):
        return "model"
    if name == "training_args.bin":
        return None
    if name.endswith(".safetensors") or (
        name.endswith((".bin", ".h5", ".msgpack")) and "model" in name
    ):
        return "model"
    return None


def state_folders(files: Iterable[str]) -> set[str]:
    """Folders holding a checkpoint's state: an optimizer, scheduler, RNG or scaler file, or
    anything named ``rng_state_*``. One pass over the files, for :func:`is_checkpoint`."""
    found: set[str] = set()
    for path in files:
        parts = path.split("/")
        if parts[-1] in _CHECKPOINT_FILES:
            found.add("/".join(parts[:-1]))
        for depth, part in enumerate(parts):
            if part.startswith("rng_state_"):
                found.add("/".join(parts[:depth]))
    return found


def is_checkpoint(folder: str, states: set[str]) -> bool:
    """A folder the Trainer saved a checkpoint into (not the output folder's final state);
    ``states`` is :func:`state_folders` of the source's files."""
    name = folder.rsplit("/", 1)[-1]
    return bool(name and CHECKPOINT_DIR.fullmatch(name)) or folder in states


def jsonable(value: Any) -> Any:
    """JSON a database column accepts: NaN/Infinity become None, integers beyond int64 text."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if type(value) is float and not math.isfinite(value):
        return None
    if type(value) is int and not -_INT64 <= value < _INT64:
        return str(value)
    return value

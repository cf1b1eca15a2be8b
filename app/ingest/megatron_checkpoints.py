"""Megatron checkpoint trees: ``<save>/latest_checkpointed_iteration.txt`` and
``<save>/iter_0002448/`` (or DeepSpeed ``global_step2448/``) folders holding
``mp_rank_XX[_YYY]/model_optim_rng.pt``, or distributed ``*.distcp`` shards with ``metadata.json``
and ``common.pt``, and Megatron-Bridge's ``train_state.pt``.

Each folder becomes a checkpoint record. The saved ``args`` (consumed_train_samples,
global_batch_size, seed) are read from the checkpoint's pickle opcodes without unpickling it;
``train_state.pt`` holds tensors and is read with torch (an optional extra, ``weights_only``) when
it is installed.
"""

from __future__ import annotations

import argparse
import io
import pickle
import re
from typing import Any

from app.ingest.context import ReadContext
from app.ingest.data_state import DataPosition, position_from_state
from app.ingest.numbers import INT32, MAX_STEP, digits, whole
from app.ingest.pickle_scan import pickled_scalars
from app.ingest.records import CheckpointRecord, ComponentRecord

FORMAT = "megatron"  # the reader's name, and the source its checkpoint manifests name
TRACKER = "latest_checkpointed_iteration.txt"
MAX_TORCH_STATE_BYTES = 16 << 20

_ITER_DIR = re.compile(r"(?:iter_|global_step)(\d+)")
_ARGS_KEYS = (
    "consumed_train_samples",
    "global_batch_size",
    "seed",
    "no_save_optim",
    "no_save_rng",
    "iteration",
)
_WEIGHTS = ("model", "optimizer", "rng", "scheduler")


def tree_checkpoints(ctx: ReadContext, files: list[str], prefix: str) -> list[CheckpointRecord]:
    folders: dict[str, dict[str, int]] = {}
    trackers = {parent_folder(f) for f in files if base_name(f) == TRACKER}
    for path in files:
        parts = path[len(prefix) :].split("/")
        for i, part in enumerate(parts[:-1]):
            here = prefix + "/".join(parts[:i])
            if _ITER_DIR.fullmatch(part) or (part == "release" and here.rstrip("/") in trackers):
                folder = prefix + "/".join(parts[: i + 1])
                folders.setdefault(folder, {})["/".join(parts[i + 1 :])] = ctx.tree.sizes[path]
                break
    records = []
    for folder, inside in sorted(folders.items()):
        record = _tree_checkpoint(ctx, folder, inside)
        if record is not None:
            records.append(record)
    return sorted(records, key=lambda r: (r.step, r.name))


def _tree_checkpoint(
    ctx: ReadContext, folder: str, inside: dict[str, int]
) -> CheckpointRecord | None:
    name = base_name(folder)
    args = _saved_args(ctx, folder, inside)
    numbered = _ITER_DIR.fullmatch(name)
    step = digits(numbered.group(1)) if numbered else whole(args.get("iteration"), below=MAX_STEP)
    if step is None:
        why = "an iteration out of range" if numbered else "a release checkpoint with no iteration"
        ctx.warnings.add(f"{folder}: {why}; not read")
        return None
    components = _components(inside)
    if args.get("no_save_optim") is True:
        components.pop("optimizer", None)
        components.pop("scheduler", None)
    if args.get("no_save_rng") is True:
        components.pop("rng", None)
    consumed = args.get("consumed_train_samples")
    state = _train_state(ctx, folder, inside)
    if state is not None and state.consumed_samples is not None:
        consumed = state.consumed_samples
    batch, seed = args.get("global_batch_size"), args.get("seed")
    return CheckpointRecord(
        name=name,
        step=step,
        consumed_samples=_int(consumed),
        seed=_int(seed),
        global_batch_size=_int(batch, below=INT32),
        components=components,
        manifest={"source": FORMAT, "folder": folder, "args": args},
    )


def _components(inside: dict[str, int]) -> dict[str, ComponentRecord]:
    """Components by file; where several ride in one file, its bytes count for the first only."""
    grouped: dict[str, list[tuple[str, int | None]]] = {}
    for rel, size in sorted(inside.items()):
        base = base_name(rel)
        kinds: tuple[str, ...] = ()
        if base == "model_optim_rng.pt" or base.endswith(".distcp"):
            kinds = _WEIGHTS
        elif base.endswith("model_states.pt"):
            kinds = ("model", "rng", "scheduler")  # DeepSpeed: Megatron's state rides along
        elif base.endswith("optim_states.pt") or base == "distrib_optim.pt":
            kinds = ("optimizer",)
        elif base.startswith("train_dataloader") and base.endswith(".pt"):
            kinds = ("dataloader",)
        for index, kind in enumerate(kinds):
            grouped.setdefault(kind, []).append((rel, size if index == 0 else None))
    return {kind: _component(parts) for kind, parts in grouped.items()}


def _component(parts: list[tuple[str, int | None]]) -> ComponentRecord:
    sizes = [size for _, size in parts if size is not None]
    return ComponentRecord(file=parts[0][0], bytes=sum(sizes) if sizes else None)


def _saved_args(ctx: ReadContext, folder: str, inside: dict[str, int]) -> dict[str, Any]:
    """Scalars of the saved ``args`` from the first rank's state (never unpickled)."""
    for rel in sorted(inside, key=lambda r: (r.count("/"), r)):
        base = base_name(rel)
        if base in ("model_optim_rng.pt", "common.pt") or base.endswith("model_states.pt"):
            with ctx.open(f"{folder}/{rel}") as stream:
                return pickled_scalars(stream, _ARGS_KEYS)
    return {}


def _train_state(ctx: ReadContext, folder: str, inside: dict[str, int]) -> DataPosition | None:
    """Megatron-Bridge's ``train_state.pt`` (a dict of tensors), through torch when installed."""
    if "train_state.pt" not in inside:
        return None
    path = f"{folder}/train_state.pt"
    if inside["train_state.pt"] > MAX_TORCH_STATE_BYTES:
        return None
    try:
        import torch
    except ImportError:
        ctx.warnings.add(
            f"{path}: install the torch extra to read train_state.pt", kind="megatron-torch"
        )
        return None
    raw = ctx.read_bytes(path, MAX_TORCH_STATE_BYTES)
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            state = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, ValueError, EOFError) as exc:
        ctx.warnings.add(f"{path}: not read ({str(exc)[:120]})", kind="megatron-train-state")
        return None
    return position_from_state(state) if isinstance(state, dict) else None


def tracker_config(
    ctx: ReadContext, files: list[str], checkpoints: list[CheckpointRecord]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    steps = {c.step for c in checkpoints}
    for path in files:
        if base_name(path) != TRACKER:
            continue
        text = ctx.read_bytes(path, 1 << 10).decode("utf-8", "replace").strip()
        iteration = digits(text) if text.isascii() else None
        if iteration is not None:
            out["latest_checkpointed_iteration"] = iteration
            if iteration not in steps:
                ctx.warnings.add(
                    f"{path}: names iteration {text} but the source holds no such checkpoint"
                )
        elif text == "release":
            out["latest_checkpointed_iteration"] = text
        else:
            ctx.warnings.add(f"{path}: expected an iteration or 'release', got {text[:40]!r}")
    return out


def _int(value: Any, *, below: int = 2**63) -> int | None:
    """An int of the saved args (never a bool) that a database column holds."""
    return value if type(value) is int and -below <= value < below else None


def parent_folder(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


def base_name(path: str) -> str:
    return path.rsplit("/", 1)[-1]

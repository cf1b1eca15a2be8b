"""Which reader a source needs. Each format is one module; adding a format is adding a reader
here. A reader finds its run in the source tree (``detect`` returns the run's folder, "" for the
top, or None) and parses it; run-directory files beside it (a sample trace, events, checkpoint
manifests) are then added by the run-directory reader."""

from __future__ import annotations

from typing import Protocol

from app.ingest import hf_trainer, megatron, tensorboard, wandb_run
from app.ingest.context import ReadContext
from app.ingest.errors import IngestError
from app.ingest.records import ParsedRun
from app.ingest.run_directory import RunDirectoryReader
from app.ingest.source import SourceTree


class Reader(Protocol):
    name: str

    def detect(self, tree: SourceTree) -> str | None: ...

    def read(self, ctx: ReadContext, root: str) -> ParsedRun: ...


class _RunDirectory:
    name = RunDirectoryReader.name

    def detect(self, tree: SourceTree) -> str | None:
        return RunDirectoryReader.detect(tree)

    def read(self, ctx: ReadContext, root: str) -> ParsedRun:
        return RunDirectoryReader(ctx, root).read()


def readers() -> list[Reader]:
    """In order of precedence: a run directory's own metrics.jsonl wins over other logs."""
    return [
        _RunDirectory(),
        wandb_run.reader,
        tensorboard.reader,
        hf_trainer.reader,
        megatron.reader,
    ]


def read_source(ctx: ReadContext) -> ParsedRun:
    for reader in readers():
        root = reader.detect(ctx.tree)
        if root is None:
            continue
        parsed = reader.read(ctx, root)
        if reader.name != RunDirectoryReader.name:
            RunDirectoryReader(ctx, _companion_root(ctx.tree, root)).add_companions(parsed)
        parsed.source_name = ctx.tree.name
        return parsed
    names = ", ".join(r.name for r in readers()[1:])
    others = f", and not a {names} run" if names else ""
    raise IngestError(
        f"no run found: no metrics.jsonl{others} (found: {_listing(ctx.tree.files())})",
        file=ctx.tree.name,
    )


COMPANIONS = ("samples.jsonl", "events.jsonl", "evals.jsonl", "config.json", "checkpoints/")


def _companion_root(tree: SourceTree, root: str) -> str:
    """Where run-directory files sit beside a run of another format: in its folder, or in the
    folder above it (a sample trace next to a ``wandb/`` folder)."""
    parent = root.rsplit("/", 1)[0] if "/" in root else ""
    for folder in (root, parent) if root else (root,):
        prefix = f"{folder}/" if folder else ""
        names = {f[len(prefix) :] for f in tree.files() if f.startswith(prefix)}
        if any(any(x.startswith(n) for x in names) for n in COMPANIONS):
            return folder
    return root


def _listing(files: list[str]) -> str:
    if not files:
        return "nothing"
    return ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")

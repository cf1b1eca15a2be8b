from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from app.ingest.aliases import AliasTable
from app.ingest.context import ReadContext
from app.ingest.errors import Warnings
from app.ingest.formats import read_source
from app.ingest.source import DirectoryTree, Limits

LIMITS = Limits(
    max_source_bytes=1 << 30, max_members=1000, max_compression_ratio=100, max_line_bytes=1 << 20
)


def _read(root: Path, aliases: AliasTable | None = None) -> tuple:
    warnings = Warnings()
    tree = DirectoryTree(root, warnings, LIMITS)
    ctx = ReadContext(tree, aliases or AliasTable(), warnings, max_line_bytes=1 << 20)
    return read_source(ctx), warnings.summary()


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_metric_aliases_map_to_canonical_keys(tmp_path: Path) -> None:
    _write_jsonl(
        tmp_path / "metrics.jsonl",
        [
            {"iteration": 1, "lm loss": 2.0, "learning rate": 1e-3, "grad norm": 0.5},
            {"iteration": 2, "lm loss": 1.9, "learning rate": 1e-3, "ppl/train": 7.0},
        ],
    )
    parsed, warnings = _read(tmp_path, AliasTable({"ppl/train": "perplexity"}))
    assert sorted(parsed.metrics.columns) == ["grad_norm", "loss", "lr", "perplexity"]
    assert parsed.metrics.source_keys["loss"] == "lm loss"
    rows, values = parsed.metrics.columns["loss"]
    assert rows.tolist() == [0, 1] and values.tolist() == [2.0, 1.9]
    assert warnings == []


def test_nested_objects_become_slash_keys_and_evals_are_prefixed(tmp_path: Path) -> None:
    _write_jsonl(tmp_path / "metrics.jsonl", [{"step": 1, "train": {"loss": 3.0}}])
    _write_jsonl(tmp_path / "evals.jsonl", [{"step": 1, "eval_loss": 2.5, "acc": 0.5}])
    parsed, _ = _read(tmp_path)
    assert list(parsed.metrics.columns) == ["loss"]
    assert parsed.evals is not None
    assert sorted(parsed.evals.columns) == ["eval/acc", "eval/loss"]


def test_single_metrics_file_is_a_run(tmp_path: Path) -> None:
    _write_jsonl(tmp_path / "train_log.jsonl", [{"step": s, "loss": 1.0 / s} for s in range(1, 5)])
    parsed, _ = _read(tmp_path)
    assert parsed.metrics.steps.tolist() == [1, 2, 3, 4]


def test_manifest_components_and_loader_state(tmp_path: Path) -> None:
    _write_jsonl(tmp_path / "metrics.jsonl", [{"step": 1, "loss": 1.0}])
    ckpt = tmp_path / "checkpoints" / "iter_0000100"
    ckpt.mkdir(parents=True)
    (ckpt / "manifest.json").write_text(
        json.dumps(
            {
                "components": {
                    "Model": {"file": "m.pt", "bytes": 10},
                    "dataloader": {"file": "loader.json", "bytes": 5},
                },
                "seed": 7,
            }
        )
    )
    (ckpt / "loader.json").write_text(json.dumps({"epoch": 2, "consumed_in_epoch": 64}))
    parsed, _ = _read(tmp_path)
    (record,) = parsed.checkpoints
    assert record.step == 100  # from the folder name
    assert sorted(record.components) == ["dataloader", "model"]
    assert record.data_state == {"epoch": 2, "consumed_in_epoch": 64}
    assert record.seed == 7


def test_sample_trace_is_compact(tmp_path: Path) -> None:
    _write_jsonl(tmp_path / "metrics.jsonl", [{"step": 1, "loss": 1.0}])
    _write_jsonl(
        tmp_path / "samples.jsonl",
        [
            {"step": 1, "sample_ids": [5, 6, 7]},
            {"step": 2, "sample_ids": []},
            {"step": 3, "indices": [2**40]},
        ],
    )
    parsed, _ = _read(tmp_path)
    trace = parsed.samples
    assert trace.counts.tolist() == [3, 0, 1]
    assert trace.ids.dtype == np.int64
    assert trace.ids.tolist() == [5, 6, 7, 2**40]
    assert trace.offsets.tolist() == [0, 3, 3, 4]

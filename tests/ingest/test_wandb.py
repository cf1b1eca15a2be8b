from __future__ import annotations

import math
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from app.ingest import wandb_log
from app.ingest.aliases import AliasTable
from app.ingest.context import ReadContext
from app.ingest.errors import IngestError, Warnings
from app.ingest.records import MetricTable, ParsedRun
from app.ingest.source import DirectoryTree, Limits
from app.ingest.wandb_run import reader, run_ids
from tests.ingest import wandb_runs as wr

LIMITS = Limits(
    max_source_bytes=1 << 30, max_members=1000, max_compression_ratio=100, max_line_bytes=1 << 20
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> wr.Runs:
    return wr.write_runs(tmp_path_factory.mktemp("wandb"))


def _tree(root: Path) -> tuple[DirectoryTree, ReadContext, Warnings]:
    warnings = Warnings(limit_per_kind=50)
    tree = DirectoryTree(root, warnings, LIMITS)
    return tree, ReadContext(tree, AliasTable(), warnings, max_line_bytes=1 << 20), warnings


def _read(root: Path) -> tuple[ParsedRun, list[str]]:
    tree, ctx, warnings = _tree(root)
    found = reader.detect(tree)
    assert found is not None
    parsed = reader.read(ctx, found)
    return parsed, [w for w in warnings.summary() if "not a regular file" not in w]


def _column(table: MetricTable, key: str) -> dict[int, float]:
    rows, values = table.columns[key]
    return dict(zip(table.steps[rows].tolist(), values.tolist(), strict=True))


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def _log(root: Path) -> Path:
    (path,) = wr.log_files(root)
    return path


def test_finished_run_history_config_and_summary(runs: wr.Runs) -> None:
    tree, _, _ = _tree(runs.finished)
    assert reader.detect(tree) == "wandb"
    parsed, warnings = _read(runs.finished)
    metrics = parsed.metrics
    assert parsed.source_format == "wandb" and parsed.external_id == wr.FINISHED_ID
    assert metrics.steps.tolist() == list(range(1, 41))
    assert np.all(np.diff(metrics.times) >= 0) and np.isfinite(metrics.times).all()

    loss = _column(metrics, "loss")  # nested {"train": {"loss": ...}}, canonical name
    assert metrics.source_keys["loss"] == "train/loss"
    assert math.isnan(loss[7]) and loss[8] == pytest.approx(0.5) and len(loss) == 40
    assert _column(metrics, "lr")[8] == math.inf
    assert _column(metrics, "train/acc/top1")[40] == pytest.approx(0.4)
    assert _column(metrics, wr.LONG_KEY)[3] == 4.0
    assert not {"phase", "flag", "notes"} & set(metrics.columns)
    assert any("'phase' holds text values" in w for w in warnings)
    assert any("'flag' holds boolean values" in w for w in warnings)
    assert any("non-finite value(s) of 'train/loss' kept" in w for w in warnings)

    assert parsed.evals is not None
    assert sorted(parsed.evals.columns) == ["eval/acc", "eval/loss", "eval/test_f1", "eval/val/ppl"]
    assert parsed.evals.steps.tolist() == [10, 20, 30, 40]
    assert _column(parsed.evals, "eval/loss")[20] == pytest.approx(0.15)

    config = parsed.config
    assert config["lr"] == 3e-4 and config["batch_size"] == 32
    assert config["optimizer"] == {"name": "adamw", "betas": [0.9, 0.95]}
    assert "_wandb" not in config
    summary = config["wandb_summary"]
    assert summary["best_eval_loss"] == 0.075 and summary["tag"] == "final"
    assert summary["train/loss"] == pytest.approx(0.1)
    assert summary["diverged_at"] == "Infinity"  # stored as JSON: PostgreSQL refuses Infinity
    assert "notes" not in summary  # 70 kB of text is not "small"

    start, end = parsed.events
    assert (start.kind, start.step, start.payload["resumed_from"]) == ("process_start", 0, None)
    assert (end.kind, end.step, end.payload["reason"]) == ("process_exit", 40, "finished")
    assert start.time is not None and start.time <= metrics.times[0]


@pytest.mark.parametrize("which", ["finished", "crashed", "resumed"])
def test_values_match_wandbs_own_decoding(runs: wr.Runs, which: str) -> None:
    root = getattr(runs, which)
    parsed, _ = _read(root)
    expected_rows = [row for p in wr.log_files(root) for row in wr.history_rows(p.read_bytes())]
    assert parsed.metrics.steps.tolist() == [row["_step"] for row in expected_rows]
    expected: dict[str, list[tuple[int, float]]] = {}
    for row in expected_rows:
        for key, value in row.items():
            if not key.startswith("_") and type(value) in (int, float):
                expected.setdefault(key, []).append((row["_step"], value))
    got: dict[str, list[tuple[int, float]]] = {}
    for table in (parsed.metrics, parsed.evals):
        for column, (rows, values) in (table.columns if table else {}).items():
            if not column.startswith("system/"):
                pairs = zip(table.steps[rows].tolist(), values.tolist(), strict=True)
                got[table.source_keys[column]] = list(pairs)
    assert got.keys() == expected.keys()
    for key, pairs in expected.items():
        assert [s for s, _ in got[key]] == [s for s, _ in pairs], key
        np.testing.assert_array_equal([v for _, v in got[key]], [v for _, v in pairs])


def test_system_stats_sit_on_the_preceding_history_row(runs: wr.Runs) -> None:
    parsed, _ = _read(runs.finished)
    expected = wr.stats_by_row(_log(runs.finished).read_bytes())
    system = {k: v for k, v in parsed.metrics.columns.items() if k.startswith("system/")}
    assert system and set(system) == set(expected)
    for key, (rows, values) in system.items():
        assert dict(zip(rows.tolist(), values.tolist(), strict=True)) == expected[key]


def test_resume_is_a_second_segment_with_the_replayed_steps(runs: wr.Runs) -> None:
    parsed, warnings = _read(runs.resumed)
    # wandb drops a step below the current one only within a process: the resumed process
    # starts at step 0 again offline, so its replayed steps 7..10 are all in its log
    assert parsed.metrics.steps.tolist() == [*range(1, 11), *range(7, 13)]
    rows, values = parsed.metrics.columns["loss"]
    assert rows.tolist() == list(range(16))
    assert values[:10].tolist() == [1.0 / s for s in range(1, 11)]
    assert values[10:].tolist() == [2.0 / s for s in range(7, 13)]
    kinds = [(e.kind, e.step) for e in parsed.events]
    assert kinds == [
        ("process_start", 0),
        ("process_exit", 10),
        ("process_start", 6),
        ("process_exit", 12),
    ]
    first_exit, second_start, second_exit = parsed.events[1:]
    assert second_start.payload["resumed_from"]
    assert first_exit.time is not None and second_start.time is not None
    assert first_exit.time < second_start.time <= parsed.metrics.times[10]
    assert second_exit.payload == {"reason": "crash", "exit_code": 1}
    assert warnings == []
    tree, _, _ = _tree(runs.resumed)
    assert run_ids(tree) == {
        wr.RESUMED_ID: [str(p.relative_to(runs.resumed)) for p in wr.log_files(runs.resumed)]
    }


def test_a_folder_without_history_is_not_a_segment(runs: wr.Runs, tmp_path: Path) -> None:
    root = _copy(runs.resumed, tmp_path / "run")
    empty = root / "wandb" / f"offline-run-29991231_235959-{wr.RESUMED_ID}"
    empty.mkdir()
    (empty / f"run-{wr.RESUMED_ID}.wandb").write_bytes(wandb_log.HEADER)
    parsed, warnings = _read(root)
    assert len(parsed.events) == 4 and parsed.metrics.num_rows == 16
    assert any("no history rows" in w and empty.name in w for w in warnings)


def test_killed_writer_keeps_what_it_wrote(runs: wr.Runs) -> None:
    parsed, warnings = _read(runs.crashed)
    steps = parsed.metrics.steps
    assert 0 < steps.size <= wr.CRASH_ROWS
    assert steps.tolist() == list(range(1, steps.size + 1))
    end = parsed.events[-1]
    assert (end.kind, end.step, end.payload["reason"]) == ("process_exit", steps.size, "crash")
    assert any("no exit record" in w and wr.CRASHED_ID in w for w in warnings)


def _cut_inside(data: bytes, record_kind: str, last: bool) -> int:
    """An offset inside the chunks of a record of that kind (the last or the longest)."""
    found = []
    parts: list[tuple[int, int, int]] = []
    records = iter(wr.records(data))
    for chunk in wr.chunks(data):
        parts.append(chunk)
        if chunk[2] in (1, 4):
            if next(records).WhichOneof("record_type") == record_kind:
                found.append(parts)
            parts = []
    spans = found[-1] if last else max(found, key=len)
    pos, length, _ = spans[len(spans) // 2]
    return pos + 7 + length // 2


@pytest.mark.parametrize(
    ("last", "rows"),
    [(True, 39), (False, 19)],  # inside the last row; inside the 70 kB row of step 20
)
def test_log_cut_mid_chunk_keeps_the_records_before(
    runs: wr.Runs, tmp_path: Path, last: bool, rows: int
) -> None:
    full, _ = _read(runs.finished)
    root = _copy(runs.finished, tmp_path / "run")
    path = _log(root)
    data = path.read_bytes()
    path.write_bytes(data[: _cut_inside(data, "history", last)])
    parsed, warnings = _read(root)
    assert parsed.metrics.steps.tolist() == list(range(1, rows + 1))
    for key in ("loss", "lr", wr.LONG_KEY):
        expected = {s: v for s, v in _column(full.metrics, key).items() if s <= rows}
        assert _column(parsed.metrics, key).keys() == expected.keys()
    assert any("cut off" in w and path.name in w for w in warnings)
    assert any("no exit record" in w for w in warnings)
    assert parsed.events[-1].payload["reason"] == "crash"


def _damaged(runs: wr.Runs, tmp_path: Path, change: str) -> tuple[Path, str]:
    root = _copy(runs.finished, tmp_path / "run")
    path = _log(root)
    data = bytearray(path.read_bytes())
    chunk = wr.chunks(bytes(data))[len(wr.chunks(bytes(data))) // 2]
    pos, length, _ = chunk
    if change == "payload byte":
        data[pos + 7 + length // 2] ^= 0x40
    elif change == "length":
        struct.pack_into("<H", data, pos + 4, 40_000)
    elif change == "type":
        data[pos + 6] = 9
    elif change == "magic":
        data[:4] = b"WANB"
    elif change == "garbage":
        data[7:4096] = np.random.default_rng(0).integers(0, 256, 4089, dtype=np.uint8).tobytes()
    path.write_bytes(bytes(data))
    return root, str(path.relative_to(root))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("payload byte", "checksum mismatch"),
        ("length", "runs past the end of its 32 KiB block"),
        ("type", "unknown chunk type 9"),
        ("magic", "not a W&B run log"),
        ("garbage", "record 1 (byte 7)"),
    ],
)
def test_damage_before_the_tail_is_an_error(
    runs: wr.Runs, tmp_path: Path, change: str, message: str
) -> None:
    root, name = _damaged(runs, tmp_path, change)
    with pytest.raises(IngestError) as caught:
        _read(root)
    assert caught.value.file == name
    assert message in str(caught.value)
    if change in ("payload byte", "length", "type"):
        assert "record " in str(caught.value) and "(byte " in str(caught.value)


def test_several_run_ids_are_refused(runs: wr.Runs, tmp_path: Path) -> None:
    root = tmp_path / "mixed"
    for src in (runs.finished, runs.crashed):
        for folder in (src / "wandb").glob("offline-run-*"):
            shutil.copytree(folder, root / "wandb" / folder.name, symlinks=True)
    tree, _, _ = _tree(root)
    with pytest.raises(IngestError, match=f"{wr.CRASHED_ID}, {wr.FINISHED_ID}: ingest one run"):
        reader.detect(tree)
    ids = run_ids(tree)
    assert sorted(ids) == [wr.CRASHED_ID, wr.FINISHED_ID]
    assert all(len(paths) == 1 and paths[0].endswith(".wandb") for paths in ids.values())


def test_detect_finds_the_folder_holding_the_run(runs: wr.Runs, tmp_path: Path) -> None:
    nested = tmp_path / "nested"
    shutil.copytree(runs.finished / "wandb", nested / "myrun" / "wandb", symlinks=True)
    (nested / "myrun" / "notes.txt").write_text("not a run")
    assert reader.detect(_tree(nested)[0]) == "myrun/wandb"
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(_log(runs.finished), lone / f"run-{wr.FINISHED_ID}.wandb")
    assert reader.detect(_tree(lone)[0]) == ""
    assert _read(lone)[0].metrics.num_rows == 40
    (tmp_path / "none").mkdir()
    assert reader.detect(_tree(tmp_path / "none")[0]) is None


def test_online_folders_and_a_copied_latest_run_link(runs: wr.Runs, tmp_path: Path) -> None:
    root = tmp_path / "online"
    (folder,) = (runs.finished / "wandb").glob("offline-run-*")
    online = root / "wandb" / folder.name.removeprefix("offline-")
    shutil.copytree(folder, online, symlinks=True)
    shutil.copytree(folder, root / "wandb" / "latest-run")  # a link copied as a folder
    tree, _, _ = _tree(root)
    assert reader.detect(tree) == "wandb"
    assert run_ids(tree) == {wr.FINISHED_ID: [f"wandb/{online.name}/run-{wr.FINISHED_ID}.wandb"]}
    parsed, _ = _read(root)
    assert parsed.metrics.num_rows == 40 and len(parsed.events) == 2


def test_windows_smaller_than_a_record_read_the_same(
    runs: wr.Runs, monkeypatch: pytest.MonkeyPatch
) -> None:
    full, _ = _read(runs.finished)
    monkeypatch.setattr(wandb_log, "WINDOW_BLOCKS", 1)  # the 70 kB record spans three windows
    small, _ = _read(runs.finished)
    assert small.metrics.steps.tolist() == full.metrics.steps.tolist()
    assert sorted(small.metrics.columns) == sorted(full.metrics.columns)
    for key, (rows, values) in full.metrics.columns.items():
        np.testing.assert_array_equal(small.metrics.columns[key][0], rows)
        np.testing.assert_array_equal(small.metrics.columns[key][1], values)
    assert small.config == full.config

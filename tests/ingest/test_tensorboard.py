from __future__ import annotations

import math
import struct
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboardX import FileWriter as TbxFileWriter
from tensorboardX import SummaryWriter as TbxWriter
from tensorboardX.proto.summary_pb2 import Summary as TbxSummary
from torch.utils.tensorboard import SummaryWriter as TorchWriter

from app.ingest.aliases import AliasTable
from app.ingest.context import ReadContext
from app.ingest.errors import IngestError, Warnings
from app.ingest.records import MetricTable, ParsedRun
from app.ingest.source import DirectoryTree, Limits, SingleFileTree, ZipTree
from app.ingest.tensorboard import reader
from app.ingest.tfrecord import crc32c, crc32c_spans, masked_crc32c
from app.services.run_store import plan_layout

LIMITS = Limits(
    max_source_bytes=1 << 30, max_members=1000, max_compression_ratio=100, max_line_bytes=1 << 20
)


def _read_tree(tree: DirectoryTree | SingleFileTree | ZipTree, warnings: Warnings) -> ParsedRun:
    ctx = ReadContext(tree, AliasTable(), warnings, max_line_bytes=1 << 20)
    root = reader.detect(tree)
    assert root is not None
    return reader.read(ctx, root)


def _read(path: Path) -> tuple[ParsedRun, list[str]]:
    warnings = Warnings()
    parsed = _read_tree(DirectoryTree(path, warnings, LIMITS), warnings)
    return parsed, warnings.summary()


def _series(table: MetricTable, key: str) -> tuple[list[int], list[float]]:
    rows, values = table.columns[key]
    return table.steps[rows].tolist(), values.tolist()


def _f32(values: list[float]) -> list[float]:
    return np.asarray(values, dtype=np.float32).astype(np.float64).tolist()


def _event_files(path: Path) -> list[Path]:
    return sorted(path.rglob("events.out.tfevents.*"))


def _starts(parsed: ParsedRun) -> list[int | None]:
    return [e.step for e in parsed.events if e.kind == "process_start"]


def test_tensorboardx_scalars_become_rows_aliases_and_evals(tmp_path: Path) -> None:
    writer = TbxWriter(str(tmp_path))
    for step in range(1, 301):
        writer.add_scalar("train/loss", 3.0 / step, step)
        writer.add_scalar("learning_rate", 1e-3 * step, step)
        if step % 100 == 0:
            writer.add_scalar("eval/loss", 2.0 / step, step)
    writer.close()

    parsed, warnings = _read(tmp_path)

    assert parsed.source_format == "tensorboard"
    metrics = parsed.metrics
    assert metrics.steps.tolist() == list(range(1, 301))  # one row per step, both tags in it
    assert list(metrics.columns) == ["loss", "lr"]
    assert metrics.source_keys == {"loss": "train/loss", "lr": "learning_rate"}
    assert _series(metrics, "loss") == (
        list(range(1, 301)),
        _f32([3.0 / s for s in range(1, 301)]),
    )
    assert np.all(np.abs(metrics.times - time.time()) < 600)
    assert parsed.evals is not None
    assert _series(parsed.evals, "eval/loss") == ([100, 200, 300], _f32([0.02, 0.01, 2 / 300]))
    assert [(e.kind, e.step) for e in parsed.events] == [("process_start", 0)]
    assert warnings == []


def test_torch_writer_matches_event_accumulator_across_a_restart(tmp_path: Path) -> None:
    first = TorchWriter(str(tmp_path))
    for step in range(1, 1001):
        first.add_scalar("loss", 1.0 + math.sin(step), step)
        if step % 10 == 0:
            first.add_scalar("grad_norm", step / 7.0, step)
    first.close()
    second = TorchWriter(str(tmp_path))
    for step in range(801, 1201):  # replays 801..1000 after a resume from step 800
        second.add_scalar("loss", 2.0 + math.cos(step), step)
    second.close()
    files = _event_files(tmp_path)
    assert len(files) == 2
    prefix, pid, number = files[1].name.rsplit(".", 2)
    later = files[1].with_name(f"{prefix}.{pid}9.{number}")  # as if written by another pid
    files[1].rename(later)

    parsed, _ = _read(tmp_path)
    accumulator = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    accumulator.Reload()

    assert sorted(accumulator.Tags()["scalars"]) == ["grad_norm", "loss"]
    for tag in ("loss", "grad_norm"):
        expected = accumulator.Scalars(tag)
        steps, values = _series(parsed.metrics, tag)
        assert steps == [e.step for e in expected]
        assert values == [e.value for e in expected]
    assert len(parsed.metrics.columns["loss"][0]) == 1400  # every point, replayed ones too
    assert _starts(parsed) == [0, 800]
    assert parsed.events[1].payload == {"resumed_from": None, "file": later.name}
    assert parsed.events[1].time is not None
    back = int(np.argmax(np.diff(parsed.metrics.steps) < 0)) + 1
    assert parsed.metrics.steps[back - 1 : back + 1].tolist() == [1000, 801]
    assert parsed.metrics.times[back] >= parsed.events[1].time

    warnings = Warnings()
    layout = plan_layout(parsed, warnings)  # what the service makes of it
    assert [(s.start_step, s.end_step) for s in layout.segments] == [(0, 1000), (800, 1200)]
    assert layout.metric_ordinals[:back].max() == 0 and layout.metric_ordinals[back:].min() == 1
    assert warnings.summary() == []


def test_a_second_writer_of_the_same_process_does_not_start_a_process(tmp_path: Path) -> None:
    for epoch in range(3):
        writer = TorchWriter(str(tmp_path))  # one writer per epoch, names share host and pid
        for step in range(epoch * 10 + 1, epoch * 10 + 11):
            writer.add_scalar("loss", float(step), step)
        writer.close()

    parsed, _ = _read(tmp_path)

    assert len(_event_files(tmp_path)) == 3
    assert _starts(parsed) == [0]
    assert parsed.metrics.steps.tolist() == list(range(1, 31))


def test_tensorboardx_restart_in_the_same_folder(tmp_path: Path) -> None:
    crashed = TbxWriter(str(tmp_path), filename_suffix=".a")
    for step in range(1, 51):
        crashed.add_scalar("loss", float(step), step)
    crashed.flush()
    crashed.close()
    resumed = TbxWriter(str(tmp_path), filename_suffix=".b")
    for step in range(41, 61):
        resumed.add_scalar("loss", 100.0 + step, step)
    resumed.close()

    parsed, _ = _read(tmp_path)

    assert parsed.metrics.steps.tolist() == list(range(1, 51)) + list(range(41, 61))
    assert _starts(parsed) == [0, 40]
    assert parsed.events[1].payload["file"].endswith(".b")


def test_purge_step_session_start_is_a_process_start(tmp_path: Path) -> None:
    writer = TorchWriter(str(tmp_path))
    for step in range(1, 21):
        writer.add_scalar("loss", float(step), step)
    writer.close()
    resumed = TorchWriter(str(tmp_path), purge_step=11)  # writes a SessionLog START
    for step in range(11, 16):
        resumed.add_scalar("loss", -float(step), step)
    resumed.close()

    parsed, _ = _read(tmp_path)

    assert _starts(parsed) == [0, 10]
    assert parsed.events[1].payload["purge_step"] == 11
    assert _series(parsed.metrics, "loss")[0] == list(range(1, 21)) + list(range(11, 16))


def test_tensor_scalars_new_style_and_tf2_tensor_content(tmp_path: Path) -> None:
    writer = TorchWriter(str(tmp_path / "torch"))
    for step in range(1, 4):
        writer.add_scalar("train/loss", 0.5 * step, step, new_style=True)  # packed float_val
        writer.add_scalar("lr", 0.1 / step, step, new_style=True, double_precision=True)
    writer.close()

    # TF2's writer (TensorFlow is not installed) stores a scalar as tensor_content bytes and
    # names the plugin only in a tag's first value; built with tensorboard's own protos and
    # written by tensorboard's own record writer.
    tf2 = EventFileWriter(str(tmp_path / "tf2"))
    scalars = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars"))
    for step in range(1, 4):
        content = TensorProto(
            dtype=1, tensor_shape=TensorShapeProto(), tensor_content=struct.pack("<f", step / 4)
        )
        count = TensorProto(dtype=9, tensor_shape=TensorShapeProto(), int64_val=[-step])
        vector = TensorProto(
            dtype=1,
            tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=2)]),
            float_val=[1.0, 2.0],
        )
        values = [
            Summary.Value(tag="epoch_loss", tensor=content),
            Summary.Value(tag="delta", tensor=count),
            Summary.Value(tag="pair", tensor=vector),
            Summary.Value(tag="unmarked", tensor=content),
        ]
        if step == 1:
            for value in values[:3]:
                value.metadata.CopyFrom(scalars)
        tf2.add_event(Event(wall_time=1000.0 + step, step=step, summary=Summary(value=values)))
    tf2.close()

    torch_run, _ = _read(tmp_path / "torch")
    tf2_run, warnings = _read(tmp_path / "tf2")

    assert _series(torch_run.metrics, "loss") == ([1, 2, 3], [0.5, 1.0, 1.5])
    assert _series(torch_run.metrics, "lr") == ([1, 2, 3], [0.1, 0.05, 0.1 / 3])  # doubles
    assert sorted(tf2_run.metrics.columns) == ["delta", "epoch_loss"]  # not the 2-vector
    assert _series(tf2_run.metrics, "epoch_loss") == ([1, 2, 3], [0.25, 0.5, 0.75])
    assert _series(tf2_run.metrics, "delta") == ([1, 2, 3], [-1.0, -2.0, -3.0])
    assert tf2_run.metrics.times.tolist() == [1001.0, 1002.0, 1003.0]
    assert any("unmarked" in w and "not marked as scalars" in w for w in warnings)


def test_non_finite_values_are_kept_with_a_warning(tmp_path: Path) -> None:
    writer = TbxWriter(str(tmp_path))
    for step, value in enumerate([1.0, math.nan, math.inf, -math.inf, 2.0], start=1):
        writer.add_scalar("loss", value, step)
    writer.close()

    parsed, warnings = _read(tmp_path)

    values = parsed.metrics.columns["loss"][1]
    assert values[0] == 1.0 and math.isnan(values[1]) and values[4] == 2.0
    assert values[2] == math.inf and values[3] == -math.inf
    assert any("3 non-finite value(s) of 'loss'" in w and "step 2" in w for w in warnings)


def _write_plain(path: Path, steps: int = 50) -> Path:
    writer = TbxWriter(str(path))
    for step in range(1, steps + 1):
        writer.add_scalar("loss", float(step), step)
    writer.close()
    (file,) = _event_files(path)
    return file


def _record_offsets(raw: bytes) -> list[int]:
    offsets, pos = [], 0
    while pos < len(raw):
        offsets.append(pos)
        pos += 16 + struct.unpack_from("<Q", raw, pos)[0]
    return offsets


def test_truncated_last_record_keeps_the_rest_with_a_warning(tmp_path: Path) -> None:
    file = _write_plain(tmp_path)
    raw = file.read_bytes()
    file.write_bytes(raw[:-7])

    parsed, warnings = _read(tmp_path)

    assert parsed.metrics.steps.tolist() == list(range(1, 50))
    assert len(warnings) == 1
    assert file.name in warnings[0] and "record 51 is cut off" in warnings[0]


def test_zero_filled_tail_is_a_truncation(tmp_path: Path) -> None:
    file = _write_plain(tmp_path)
    file.write_bytes(file.read_bytes() + bytes(4096))

    parsed, warnings = _read(tmp_path)

    assert parsed.metrics.steps.tolist() == list(range(1, 51))
    assert any("4096 zero bytes" in w for w in warnings)


@pytest.mark.parametrize(("where", "what"), [(20, "data"), (3, "length")])
def test_corrupt_record_in_the_middle_names_file_and_record(
    tmp_path: Path, where: int, what: str
) -> None:
    file = _write_plain(tmp_path)
    raw = bytearray(file.read_bytes())
    record = 10  # 1-based: the file version event is record 1
    at = _record_offsets(bytes(raw))[record - 1]
    raw[at + where] ^= 0x40
    file.write_bytes(bytes(raw))

    with pytest.raises(IngestError) as caught:
        _read(tmp_path)

    assert caught.value.file is not None and caught.value.file.endswith(file.name)
    assert f"record {record} " in str(caught.value)
    assert f"{what} checksum mismatch" in str(caught.value)


def test_garbage_with_valid_checksums_is_an_error_naming_the_record(tmp_path: Path) -> None:
    file = _write_plain(tmp_path, steps=3)
    payload = b"\x2a\x05\x0a\x09\x0a"  # a summary whose value runs past its end
    header = struct.pack("<Q", len(payload))
    record = header + struct.pack("<I", masked_crc32c(header)) + payload
    record += struct.pack("<I", masked_crc32c(payload))
    file.write_bytes(file.read_bytes() + record)

    with pytest.raises(IngestError, match="record 5: not a valid Event"):
        _read(tmp_path)


def test_crc32c_matches_the_castagnoli_check_value_and_per_span_batches() -> None:
    assert crc32c(b"123456789") == 0xE3069283
    rng = np.random.default_rng(7)
    buf = rng.integers(0, 256, 50_000, dtype=np.uint8)
    starts = rng.integers(0, 40_000, 200)
    lengths = rng.integers(0, 3000, 200)
    lengths[:4] = [0, 1, 256, 257]  # empty, and around the piece size of long spans
    lengths = np.minimum(lengths, buf.size - starts)
    raw = buf.tobytes()

    batched = crc32c_spans(buf, starts, lengths).tolist()

    assert batched == [crc32c(raw[a : a + n]) for a, n in zip(starts, lengths, strict=True)]


def test_every_one_of_200k_scalars_is_read(tmp_path: Path) -> None:
    writer = TbxFileWriter(str(tmp_path), max_queue=1000)
    tags = [f"metric_{i:02d}" for i in range(20)]
    for step in range(10_000):  # TF1-style: one event holds many values
        values = [TbxSummary.Value(tag=t, simple_value=step + i / 32) for i, t in enumerate(tags)]
        writer.add_summary(TbxSummary(value=values), step)
    writer.close()

    start = time.perf_counter()
    parsed, warnings = _read(tmp_path)
    elapsed = time.perf_counter() - start

    print(f"200k scalars read in {elapsed:.2f}s")  # measured, not asserted
    assert parsed.metrics.num_points == 200_000
    assert parsed.metrics.num_rows == 10_000
    for i, tag in enumerate(tags):
        steps, values = _series(parsed.metrics, tag)
        assert steps == list(range(10_000))
        assert values == _f32([s + i / 32 for s in range(10_000)])
    assert warnings == []


def test_concurrent_sub_folders_prefix_their_tags(tmp_path: Path) -> None:
    writer = TorchWriter(str(tmp_path / "torch"))
    for step in range(1, 6):
        writer.add_scalar("train/loss", 1.0 / step, step)
        writer.add_scalars("acc", {"train": 0.5, "val": 0.25}, step)  # acc_train/, acc_val/
    writer.close()
    train = TbxWriter(str(tmp_path / "keras" / "train"))
    validation = TbxWriter(str(tmp_path / "keras" / "validation"))
    for epoch in range(3):
        train.add_scalar("epoch_loss", 1.0 - epoch / 10, epoch)
        validation.add_scalar("epoch_loss", 2.0 - epoch / 10, epoch)
    train.close()
    validation.close()

    torch_run, _ = _read(tmp_path / "torch")
    keras_run, _ = _read(tmp_path / "keras")

    assert list(torch_run.metrics.columns) == ["loss", "acc_train/acc", "acc_val/acc"]
    assert torch_run.metrics.steps.tolist() == [1, 2, 3, 4, 5]  # one row per step
    assert list(keras_run.metrics.columns) == ["train/epoch_loss"]
    assert keras_run.evals is not None
    assert _series(keras_run.evals, "eval/epoch_loss") == ([0, 1, 2], _f32([2.0, 1.9, 1.8]))


def test_folders_written_one_after_another_are_launches_of_one_run(tmp_path: Path) -> None:
    for launch, steps in (("Jan01_host", range(1, 31)), ("Jan02_host", range(21, 41))):
        writer = TbxWriter(str(tmp_path / "runs" / launch))
        for step in steps:
            writer.add_scalar("train/loss", float(step), step)
        writer.close()

    parsed, warnings = _read(tmp_path)

    assert list(parsed.metrics.columns) == ["loss"]  # no folder prefix
    assert _series(parsed.metrics, "loss")[0] == list(range(1, 31)) + list(range(21, 41))
    assert _starts(parsed) == [0, 20]
    assert any("consecutive launches" in w for w in warnings)


def test_hparams_files_go_to_the_config_not_the_series(tmp_path: Path) -> None:
    writer = TorchWriter(str(tmp_path))
    for step in range(1, 11):
        writer.add_scalar("loss", 1.0, step)
    writer.add_hparams({"lr": 0.1}, {"hparam/accuracy": 0.75})  # a sub-folder of its own
    writer.close()

    parsed, _ = _read(tmp_path)

    assert parsed.config == {"hparam_metrics": {"hparam/accuracy": 0.75}}
    assert list(parsed.metrics.columns) == ["loss"]
    assert _starts(parsed) == [0]


def test_detect_finds_the_common_folder_or_nothing(tmp_path: Path) -> None:
    _write_plain(tmp_path / "out" / "logs" / "a")
    _write_plain(tmp_path / "out" / "logs" / "b" / "c")
    (tmp_path / "out" / "notes.txt").write_text("x")
    warnings = Warnings()

    assert reader.detect(DirectoryTree(tmp_path, warnings, LIMITS)) == "out/logs"
    assert reader.detect(DirectoryTree(tmp_path / "out" / "logs" / "a", warnings, LIMITS)) == ""
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "metrics.jsonl").write_text("{}\n")
    assert reader.detect(DirectoryTree(tmp_path / "plain", warnings, LIMITS)) is None


def test_single_file_and_zip_sources(tmp_path: Path) -> None:
    file = _write_plain(tmp_path / "run", steps=40)
    archive = tmp_path / "run.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(file, f"exp/run/{file.name}")

    single = _read_tree(SingleFileTree(file, file.name), Warnings())
    zipped_tree = ZipTree(archive, archive.name, Warnings(), LIMITS)
    try:
        zipped = _read_tree(zipped_tree, Warnings())
    finally:
        zipped_tree.close()

    assert single.metrics.steps.tolist() == list(range(1, 41))
    assert zipped.metrics.steps.tolist() == list(range(1, 41))
    assert zipped.events[0].payload["file"] == f"exp/run/{file.name}"


def test_no_scalars_is_an_error(tmp_path: Path) -> None:
    writer = TbxWriter(str(tmp_path))
    writer.add_text("note", "hello", 1)
    writer.close()

    with pytest.raises(IngestError, match="no scalar values in 1 event file"):
        _read(tmp_path)

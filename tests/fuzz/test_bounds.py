"""Inputs shaped to make a reader or the layout do superlinear work (many restarts, saves,
checkpoints, files) finish within a time bound; a line far past its limit and a run of more
restarts than a run can hold fail in bounded time and memory (in a child process)."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.record_writer import RecordWriter

from tests.fuzz import harness
from tests.fuzz.bounded import ingest_bounded
from tests.fuzz.structures import leveldb_log

SECONDS = 30.0
MB = 1 << 20


def _read(reader: str, files: dict[str, bytes]) -> harness.Outcome:
    started = time.monotonic()
    outcome = harness.read_files(reader, files, seconds=SECONDS)
    assert time.monotonic() - started < SECONDS
    return outcome


def _jsonl(rows: list[dict]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def test_megatron_log_of_many_saves_and_restarts() -> None:
    lines = []
    for i in range(1, 20_001):  # saves between logged lines, and a restart every other line
        lines.append(
            f" iteration {2 * i}/ 40000 | consumed samples: {8 * i} | global batch size: 4 |"
        )
        lines.append(f"  successfully saved checkpoint at iteration {2 * i + 1} to /ckpt")
        if i % 2:
            lines.append(f" iteration {2 * i - 1}/ 40000 | consumed samples: {8 * i} |")
    outcome = _read("megatron", {"train.log": "\n".join(lines).encode() + b"\n"})
    assert outcome.parsed is not None and len(outcome.parsed.checkpoints) == 20_000


def test_many_folders_with_a_trainer_state() -> None:
    state = b'{"global_step": 1, "log_history": [{"loss": 1.0, "step": 1}]}'
    files = {f"out/x{i}/trainer_state.json": state for i in range(20_000)}
    files["out/trainer_state.json"] = state
    assert _read("hf_trainer", files).parsed is not None


def test_many_diverging_trainer_checkpoints() -> None:
    base = [{"loss": 1.0, "step": s} for s in range(1, 201)]
    files = {"out/trainer_state.json": json.dumps({"global_step": 999, "log_history": base})}
    for c in range(1, 1001):
        history = [dict(e) for e in base]
        history[199 - c % 199]["loss"] = 2.0 + c  # each diverges from the newest somewhere
        state = {"global_step": c, "log_history": history}
        files[f"out/checkpoint-{c}/trainer_state.json"] = json.dumps(state)
    encoded = {path: text.encode() for path, text in files.items()}
    assert _read("hf_trainer", encoded).parsed is not None
    encoded["out/checkpoint-5000/trainer_state.json"] = encoded["out/trainer_state.json"]
    refused = _read("hf_trainer", encoded)
    assert refused.error is not None and "1001 checkpoint folders" in str(refused.error)


def test_run_directory_of_many_starts_and_checkpoints() -> None:
    files = {
        "run/metrics.jsonl": _jsonl([{"step": s, "loss": 1.0} for s in range(1, 40_001)]),
        "run/events.jsonl": _jsonl(
            [{"event": "process_start", "step": 2 * s, "time": 1e9 + s} for s in range(20_000)]
        ),
    }
    for c in range(0, 40_000, 8):  # 5000 checkpoints
        files[f"run/checkpoints/step_{c}/manifest.json"] = json.dumps({"step": c}).encode()
    outcome = _read("run_directory", files)
    assert outcome.parsed is not None and len(outcome.parsed.checkpoints) == 5000


def test_many_tensorboard_files_of_one_process() -> None:
    files = {}
    for i in range(3000):
        buffer = io.BytesIO()
        value = Summary.Value(tag="loss", simple_value=1.0)
        event = Event(wall_time=1e9 + i, step=i, summary=Summary(value=[value]))
        RecordWriter(buffer).write(event.SerializeToString())
        files[f"events.out.tfevents.{1700000000 + i}.host.7.{i}"] = buffer.getvalue()
    assert _read("tensorboard", files).parsed is not None


def test_many_wandb_folders_of_one_run() -> None:
    from wandb.proto import wandb_internal_pb2 as pb

    files = {}
    for n in range(300):  # 300 resumes of one run id
        records = []
        for step in range(n * 10, n * 10 + 20):
            item = pb.HistoryItem(key="_step", value_json=str(step))
            loss = pb.HistoryItem(key="loss", value_json="1.0")
            records.append(pb.Record(history=pb.HistoryRecord(item=[item, loss])))
        log = leveldb_log([r.SerializeToString() for r in records])
        files[f"wandb/run-20250101_{n:06d}-abc/run-abc.wandb"] = log
    assert _read("wandb", files).parsed is not None


def test_a_line_far_past_its_limit_fails_in_bounded_memory(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    with metrics.open("wb") as f:
        f.write(b'{"step": 1, "loss": 1.0}\n{"step": 2, "loss": "')
        f.truncate(256 * MB)  # one line of 256 MiB (zeros: a sparse file)
    job = ingest_bounded(metrics, tmp_path / "home", seconds=SECONDS, max_line_bytes=4 * MB)
    assert job["state"] == "failed", job
    assert job["error"] == "metrics.jsonl line 2: line longer than 4194304 bytes", job
    assert job["seconds"] < SECONDS and job["rss_growth_mb"] < 64, job


def test_more_restarts_than_a_run_holds_fail_in_bounded_time(tmp_path: Path) -> None:
    back = tmp_path / "back.jsonl"  # the step goes back on every row: a restart each
    back.write_bytes(_jsonl([{"step": 70_000 - i, "loss": 1.0} for i in range(70_000)]))
    job = ingest_bounded(back, tmp_path / "over", seconds=SECONDS)
    assert job["state"] == "failed", job
    assert "70000 process lifetimes" in job["error"] and "65535" in job["error"], job
    assert job["seconds"] < SECONDS, job
    repeated = tmp_path / "repeated.jsonl"  # the same step on every row
    repeated.write_bytes(_jsonl([{"step": 0, "loss": 1.0}] * 20_000))
    job = ingest_bounded(repeated, tmp_path / "under", seconds=SECONDS)
    assert job["state"] == "succeeded" and job["counts"]["segments"] == 20_000, job
    assert job["seconds"] < SECONDS and job["rss_growth_mb"] < 200, job

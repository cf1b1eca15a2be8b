"""Hypothesis strategies that build whole sources of each format from their parts: JSON Lines
records of each run-directory file kind, W&B records and TensorBoard events built with the
tools' own protobuf classes (and their framing), Trainer states, Megatron log lines. Values are
mostly plausible with hostile ones mixed in, so inputs get past the first check of a reader.
"""

from __future__ import annotations

import io
import json
import math
import struct
import zlib
from typing import Any

from hypothesis import strategies as st

from app.ingest.aliases import DEFAULT_ALIASES, STEP_KEYS, TIME_KEYS
from tests.fuzz.mutate import HOSTILE_TOKENS, dump, json_values, mutated_bytes
from tests.fuzz.seeds import LOADER_STATES, Source

ALIASES = sorted({n for names in DEFAULT_ALIASES.values() for n in names} | set(DEFAULT_ALIASES))
EVENT_KINDS = [
    "process_start",
    "process_exit",
    "checkpoint_save_start",
    "checkpoint_save_end",
    "eval",
    "",
]


def steps(n: int) -> st.SearchStrategy[list[int]]:
    """Steps of ``n`` rows: rising, with repeats, steps going back (restarts) and huge steps."""
    return st.one_of(
        st.just(list(range(1, n + 1))),
        st.lists(st.integers(0, 50), min_size=n, max_size=n),
        st.lists(
            st.sampled_from([0, 1, 2, 2**31 - 1, 2**31, 2**53, 2**62 - 1, 2**62, 2**63]),
            min_size=n,
            max_size=n,
        ),
        st.just([n - i for i in range(n)]),
    )


def numbers() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(-(2**70), 2**70),
        st.floats(-10, 10),
    )


def metric_keys() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(ALIASES),
        st.sampled_from(["eval/loss", "eval_loss", "acc", "a/b/c", "system/gpu", "_runtime"]),
        st.text(min_size=1, max_size=12),
        st.sampled_from(["k" * 400, "lo\x00ss", "\ud800", " ", "eval/" + "x" * 300]),
    )


def hostile(draw: st.DrawFn) -> bool:
    """Whether this file gets hostile values (one in three); the others only plausible ones,
    so that most sources get past the first check."""
    return one_in(draw, 3)


def one_in(draw: st.DrawFn, n: int) -> bool:
    """True one time in ``n`` (False for hypothesis' simplest draw)."""
    return draw(st.integers(0, n - 1)) == n - 1


@st.composite
def metric_rows(draw: st.DrawFn, *, evals: bool = False) -> list[dict[str, Any]]:
    bad = hostile(draw)
    n = draw(st.integers(0, 25))
    row_steps = draw(steps(n)) if bad else list(range(1, n + 1))
    keys = draw(st.lists(metric_keys(), min_size=1, max_size=5, unique=True))
    step_key = draw(st.sampled_from(STEP_KEYS))
    time_key = draw(st.sampled_from([None, *TIME_KEYS]))
    rows = []
    start = draw(st.floats(0, 2e9))
    plausible = st.one_of(st.floats(0, 10), st.integers(0, 100), st.sampled_from([math.nan]))
    values = st.one_of(plausible, numbers(), json_values()) if bad else plausible
    for i, step in enumerate(row_steps):
        row: dict[str, Any] = {step_key: step}
        if time_key is not None:
            hostile_time = bad and one_in(draw, 5)
            row[time_key] = draw(st.one_of(numbers(), json_values())) if hostile_time else start + i
        for key in keys:
            if one_in(draw, 10):
                continue  # a key missing from a row
            row[key] = draw(values)
        if bad and one_in(draw, 15):
            row = draw(st.dictionaries(st.text(max_size=8), json_values(), max_size=4))
        if one_in(draw, 15):
            row[draw(metric_keys())] = {"nested": {"value": draw(plausible)}}
        rows.append(row)
    return rows


@st.composite
def sample_rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    bad = hostile(draw)
    n = draw(st.integers(0, 15))
    ids = st.lists(st.integers(0, 2000), max_size=16)
    if bad:
        ids = st.one_of(
            ids,
            st.lists(st.integers(-5, 2**64), max_size=4),
            st.lists(json_values(), max_size=3),
            json_values(),
        )
    keys = ["sample_ids", "ids", "indices", "sample_indices"] + (["other"] if bad else [])
    key = draw(st.sampled_from(keys))
    row_steps = draw(steps(n)) if bad else list(range(1, n + 1))
    return [
        draw(json_values()) if bad and one_in(draw, 20) else {"step": step, key: draw(ids)}
        for step in row_steps
    ]


@st.composite
def event_rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    bad = hostile(draw)
    rows = []
    kinds = st.sampled_from(EVENT_KINDS[:-1])
    texts = st.sampled_from(["step_000100", "preempted", "x" * 600, "a\x00b"])
    for step in draw(steps(draw(st.integers(0, 12)))):
        row: dict[str, Any] = {
            draw(st.sampled_from(["event", "type", "kind"])): draw(
                st.one_of(kinds, json_values()) if bad else kinds
            ),
            "step": draw(st.one_of(st.just(step), json_values())) if bad else step,
            "time": draw(st.one_of(st.floats(1e9, 2e9), json_values() if bad else numbers())),
        }
        for key in ("resumed_from", "restored", "reason"):
            if draw(st.booleans()):
                row[key] = draw(st.one_of(texts, json_values()))
        rows.append(row)
    return rows


MANIFEST_FIELDS = (
    "step",
    "time_start",
    "time_end",
    "consumed_samples",
    "epoch",
    "consumed_in_epoch",
    "seed",
    "shuffle",
    "dataset_size",
    "global_batch_size",
)


@st.composite
def manifest(draw: st.DrawFn) -> dict[str, Any]:
    bad = hostile(draw)
    doc: dict[str, Any] = {}
    for name in MANIFEST_FIELDS:
        if draw(st.integers(0, 3)):
            plausible = st.booleans() if name == "shuffle" else st.integers(0, 10_000)
            weird = st.one_of(numbers(), json_values(), st.integers(2**31, 2**70))
            doc[name] = draw(st.one_of(plausible, weird) if bad else plausible)
    components = st.dictionaries(
        st.one_of(
            st.sampled_from(["model", "optimizer", "rng", "dataloader", "Scaler"]),
            st.text(max_size=70),
        ),
        st.one_of(
            st.fixed_dictionaries(
                {"file": st.sampled_from(["loader.json", "m.pt", "../x.json"])},
                optional={"bytes": st.one_of(st.integers(0, 10**6), json_values())},
            ),
            json_values(),
        ),
        max_size=4,
    )
    doc["components"] = draw(st.one_of(components, json_values()))
    return doc


def loader_state() -> st.SearchStrategy[Any]:
    """Known loader states with one or two of their values (at any depth) replaced, or any
    JSON."""

    def paths(node: Any, at: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
        found = [at] if at else []
        if isinstance(node, dict):
            for key, value in node.items():
                found += paths(value, (*at, key))
        return found

    byte_lists = st.lists(st.integers(0, 255), min_size=8, max_size=20).flatmap(
        lambda head: st.lists(json_values(), max_size=3).map(lambda tail: head + tail)
    )

    @st.composite
    def perturbed(draw: st.DrawFn) -> Any:
        state = json.loads(json.dumps(draw(st.sampled_from(LOADER_STATES))))
        for _ in range(draw(st.integers(0, 2))):
            path = draw(st.sampled_from(paths(state)))
            node = state
            for key in path[:-1]:
                node = node[key]
            if isinstance(node, dict):
                node[path[-1]] = draw(st.one_of(json_values(), byte_lists))
        return state

    return st.one_of(perturbed(), json_values())


def jsonl(rows: list[Any], draw: st.DrawFn) -> bytes:
    lines = [dump(row) for row in rows]
    if lines and one_in(draw, 10):
        at = draw(st.integers(0, len(lines) - 1))
        lines[at] = draw(st.sampled_from([b"", b"  ", b"\r", *HOSTILE_TOKENS[:12]]))
    end = b"\n" if draw(st.integers(0, 5)) else b""  # sometimes a last line cut off
    return b"\n".join(lines) + end


@st.composite
def run_directory(draw: st.DrawFn) -> Source:
    root = draw(st.sampled_from(["", "run/", "a/b/run/"]))
    source: Source = {root + "metrics.jsonl": jsonl(draw(metric_rows()), draw)}
    if draw(st.booleans()):
        source[root + "samples.jsonl"] = jsonl(draw(sample_rows()), draw)
    if draw(st.booleans()):
        source[root + "events.jsonl"] = jsonl(draw(event_rows()), draw)
    if draw(st.booleans()):
        source[root + "evals.jsonl"] = jsonl(draw(metric_rows(evals=True)), draw)
    if draw(st.booleans()):
        config = st.dictionaries(st.text(max_size=8), json_values(), max_size=5)
        source[root + "config.json"] = dump(
            draw(config if draw(st.integers(0, 5)) else json_values())
        )
    for n in range(draw(st.integers(0, 3))):
        name = draw(st.sampled_from([f"step_{n:06d}", f"ckpt{n}", "x" * 120, "no-digits"]))
        folder = f"{root}checkpoints/{name}/"
        doc = draw(manifest())
        if isinstance(doc.get("components"), dict) and draw(st.booleans()):
            doc["components"]["dataloader"] = {"file": "loader.json"}
            source[folder + "loader.json"] = dump(draw(loader_state()))
        if draw(st.booleans()):
            doc["data_state"] = draw(loader_state())
        source[folder + "manifest.json"] = dump(doc)
    return source


# W&B: records built with wandb's protobuf classes, framed as the LevelDB log wandb writes.

WANDB_HEADER = b":W&B" + bytes([0xE1, 0xBE, 0])
BLOCK = 32 * 1024


def leveldb_log(records: list[bytes]) -> bytes:
    """The transaction log framing: 32 KiB blocks of ``crc32 | length | type | payload``."""
    out = bytearray(WANDB_HEADER)
    for record in records:
        rest, first = record, True
        while True:
            room = BLOCK - len(out) % BLOCK
            if room < 7:
                out += bytes(room)
                continue
            piece, rest = rest[: room - 7], rest[room - 7 :]
            kind = (1 if not rest else 2) if first else (4 if not rest else 3)
            crc = zlib.crc32(piece, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF
            out += struct.pack("<IHB", crc, len(piece), kind) + piece
            first = False
            if not rest:
                break
    return bytes(out)


def value_json() -> st.SearchStrategy[str]:
    return st.one_of(
        st.floats(allow_nan=True, allow_infinity=True).map(lambda v: json.dumps(v)),
        json_values().map(lambda v: json.dumps(v)),
        st.sampled_from([t.decode() for t in HOSTILE_TOKENS[:18]] + ["", "1 2", "nul", "-"]),
    )


@st.composite
def wandb_records(draw: st.DrawFn) -> list[bytes]:
    from wandb.proto import wandb_internal_pb2 as pb

    bad = hostile(draw)
    plausible_values = st.one_of(
        st.floats(allow_nan=True, allow_infinity=True).map(json.dumps),
        st.integers(-100, 100).map(json.dumps),
        st.sampled_from(['"text"', "true", "null", "[1, 2]", '{"a": 1}']),
    )
    values = st.one_of(plausible_values, value_json()) if bad else plausible_values
    keys = metric_keys().filter(lambda k: "\ud800" not in k)  # protobuf refuses surrogates
    if bad:
        keys = st.one_of(keys, st.sampled_from(["_step", "_timestamp"]))

    def item(cls: Any) -> Any:
        keyed = cls()
        if not one_in(draw, 4):
            keyed.key = draw(keys)
        else:
            keyed.nested_key.extend(draw(st.lists(st.text(max_size=6), min_size=1, max_size=3)))
        if not (bad and one_in(draw, 10)):
            keyed.value_json = draw(values)
        return keyed

    records = []
    step = 0
    for _ in range(draw(st.integers(0, 20))):
        kind = draw(
            st.sampled_from(["history"] * 5 + ["summary", "config", "stats", "run", "exit"])
        )
        record = pb.Record()
        if kind == "history":
            items = [item(pb.HistoryItem) for _ in range(draw(st.integers(0, 4)))]
            step += draw(st.integers(-2, 3) if bad else st.integers(0, 3))
            if not (bad and one_in(draw, 5)):
                items.append(pb.HistoryItem(key="_step", value_json=json.dumps(max(step, 0))))
            if not one_in(draw, 3):
                when = draw(st.floats(1e9, 2e9) if not bad else st.floats())
                items.append(pb.HistoryItem(key="_timestamp", value_json=json.dumps(when)))
            record.history.item.extend(items)
            if bad and draw(st.booleans()):
                record.history.step.num = draw(st.integers(-(2**63), 2**63 - 1))
        elif kind == "summary":
            record.summary.update.extend(
                item(pb.SummaryItem) for _ in range(draw(st.integers(0, 3)))
            )
            record.summary.remove.extend(
                item(pb.SummaryItem) for _ in range(draw(st.integers(0, 1)))
            )
        elif kind == "config":
            record.config.update.extend(item(pb.ConfigItem) for _ in range(draw(st.integers(0, 3))))
        elif kind == "stats":
            record.stats.timestamp.seconds = draw(st.integers(-(2**40), 2**40))
            record.stats.item.extend(
                pb.StatsItem(key=draw(st.text(max_size=8)), value_json=draw(values))
                for _ in range(draw(st.integers(0, 3)))
            )
        elif kind == "run":
            record.run.run_id = draw(st.text(max_size=10))
            record.run.start_time.seconds = draw(st.integers(-(2**40), 2**40))
            record.run.starting_step = draw(st.integers(-(2**63), 2**63 - 1))
            record.run.resumed = draw(st.booleans())
        else:
            record.exit.exit_code = draw(st.integers(-(2**31), 2**31 - 1))
        records.append(record.SerializeToString())
    if bad and records and one_in(draw, 3):  # a record's bytes damaged, checksums right
        at = draw(st.integers(0, len(records) - 1))
        records[at] = draw(mutated_bytes(records[at]))
    if one_in(draw, 6):
        records.append(b"\x12\x80\xb8\x02" + b"\x0a\x00" * 20_000)  # a record over two blocks
    return records


@st.composite
def wandb_run(draw: st.DrawFn) -> Source:
    source: Source = {}
    for n in range(draw(st.integers(1, 3))):
        folder = f"wandb/offline-run-2025010{n + 1}_000000-abc"
        data = leveldb_log(draw(wandb_records()))
        if draw(st.integers(0, 4)) == 0:
            data = data[: draw(st.integers(0, len(data)))]  # a killed writer
        source[f"{folder}/run-abc.wandb"] = data
    return source


# TensorBoard: Event protos written with tensorboard's own record writer.


@st.composite
def tensor_proto(draw: st.DrawFn) -> Any:
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto

    dims = draw(st.lists(st.integers(-2, 3), max_size=2))
    proto = TensorProto(
        dtype=draw(st.sampled_from([0, 1, 2, 3, 4, 5, 6, 9, 10, 14, 17, 19, 22, 23, 99])),
        tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=d) for d in dims]),
    )
    which = draw(st.sampled_from(["content", "float", "double", "int", "int64", "half", "none"]))
    if which == "content":
        proto.tensor_content = draw(st.binary(max_size=9))
    elif which == "float":
        proto.float_val.extend(draw(st.lists(st.floats(width=32), max_size=2)))
    elif which == "double":
        proto.double_val.extend(draw(st.lists(st.floats(), max_size=2)))
    elif which == "int":
        proto.int_val.extend(draw(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=2)))
    elif which == "int64":
        proto.int64_val.extend(draw(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=2)))
    elif which == "half":
        proto.half_val.extend(draw(st.lists(st.integers(0, 2**31 - 1), max_size=2)))
    return proto


@st.composite
def tensorboard_events(draw: st.DrawFn) -> bytes:
    from tensorboard.compat.proto.event_pb2 import Event, SessionLog
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.summary.writer.record_writer import RecordWriter

    buffer = io.BytesIO()
    writer = RecordWriter(buffer)
    payloads = [Event(wall_time=1.0, file_version="brain.Event:2").SerializeToString()]
    tags = st.one_of(
        st.sampled_from(["loss", "eval/acc", "val_loss", "lr", "test/x"]), st.text(max_size=8)
    )
    for _ in range(draw(st.integers(0, 25))):
        event = Event(
            wall_time=draw(st.one_of(st.floats(1e9, 2e9), st.floats())),
            step=draw(st.one_of(st.integers(0, 50), st.integers(-(2**63), 2**63 - 1))),
        )
        if draw(st.integers(0, 9)) == 0:
            event.session_log.status = draw(st.sampled_from([SessionLog.START, 2, 3]))
        else:
            values = []
            for _ in range(draw(st.integers(0, 3))):
                value = Summary.Value(tag=draw(tags))
                if draw(st.booleans()):
                    value.simple_value = draw(st.floats(width=32))
                else:
                    value.tensor.CopyFrom(draw(tensor_proto()))
                if draw(st.integers(0, 2)) == 0:
                    plugin = draw(st.sampled_from(["scalars", "hparams", "images", ""]))
                    value.metadata.CopyFrom(
                        SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name=plugin))
                    )
                values.append(value)
            event.summary.CopyFrom(Summary(value=values))
        payloads.append(event.SerializeToString())
    if len(payloads) > 1 and draw(st.integers(0, 3)) == 0:  # damaged bytes, checksums right
        at = draw(st.integers(1, len(payloads) - 1))
        payloads[at] = draw(mutated_bytes(payloads[at]))
    for payload in payloads:
        writer.write(payload)
    data = buffer.getvalue()
    if draw(st.integers(0, 5)) == 0:
        data = data[: draw(st.integers(0, len(data)))]
    return data


@st.composite
def tensorboard_run(draw: st.DrawFn) -> Source:
    source: Source = {}
    for n in range(draw(st.integers(1, 3))):
        folder = draw(st.sampled_from(["", "train/", "validation/", "runs/a/"]))
        host = draw(st.sampled_from(["host.12.0", "host.12.1", "host"]))
        source[f"{folder}events.out.tfevents.{1700000000 + n}.{host}"] = draw(tensorboard_events())
    return source


# Hugging Face Trainer: states of an output folder and its checkpoints.


@st.composite
def trainer_state(draw: st.DrawFn, global_step: int) -> bytes:
    entries = []
    for step in draw(steps(draw(st.integers(0, 12)))):
        entry: dict[str, Any] = {"step": draw(st.one_of(st.just(step), json_values()))}
        kind = draw(st.sampled_from(["train", "train", "eval", "summary", "other"]))
        if kind == "train":
            entry.update(loss=draw(numbers()), learning_rate=1e-3, epoch=draw(numbers()))
        elif kind == "eval":
            entry.update(eval_loss=draw(numbers()), epoch=draw(numbers()))
        elif kind == "summary":
            entry.update(train_runtime=draw(numbers()))
        else:
            entry.update(draw(st.dictionaries(metric_keys(), json_values(), max_size=3)))
        entries.append(entry)
    doc: dict[str, Any] = {
        "global_step": draw(st.one_of(st.just(global_step), json_values())),
        "log_history": draw(st.one_of(st.just(entries), json_values())),
        "epoch": draw(numbers()),
        "train_batch_size": draw(st.one_of(st.integers(0, 64), json_values())),
    }
    for key in ("logging_steps", "eval_steps", "save_steps", "max_steps"):
        if draw(st.booleans()):
            doc[key] = draw(st.one_of(st.integers(1, 10), json_values()))
    return dump(doc)


@st.composite
def hf_run(draw: st.DrawFn) -> Source:
    import pickle

    source: Source = {"out/trainer_state.json": draw(trainer_state(40))}
    for n in draw(st.lists(st.integers(0, 40), max_size=3, unique=True)):
        folder = f"out/{draw(st.sampled_from(['checkpoint-', 'ckpt-', 'checkpoint-0']))}{n}/"
        source[folder + "trainer_state.json"] = draw(trainer_state(n))
        args = draw(
            st.one_of(
                st.binary(max_size=64),
                st.dictionaries(
                    st.sampled_from(["gradient_accumulation_steps", "seed", "data_seed"]),
                    st.one_of(st.integers(-(2**70), 2**70), st.floats(), st.none()),
                ).map(pickle.dumps),
            )
        )
        source[folder + "training_args.bin"] = args
        for name in draw(st.lists(st.sampled_from(["optimizer.pt", "rng_state_1.pth"]))):
            source[folder + name] = b"\0"
    return source


# Megatron: log lines of each kind, with hostile numbers.


def megatron_number() -> st.SearchStrategy[str]:
    return st.one_of(
        st.integers(0, 10**6).map(str),
        st.sampled_from(
            ["nan", "inf", "-inf", "1e309", "9" * 40, "-1", "1.5", "", "x", "1E+04", "0x10"]
        ),
        st.floats().map(repr),
    )


@st.composite
def megatron_line(draw: st.DrawFn) -> str:
    prefix = draw(
        st.sampled_from(["", "[default0]:", "[2025-05-09 06:11:17] ", "[2025-13-45 99:99:99]"])
    )
    iteration = draw(st.one_of(st.integers(0, 200).map(str), st.sampled_from(["9" * 30, "0"])))
    kind = draw(st.sampled_from(["iter"] * 5 + ["valid", "save", "saved", "load", "exit", "fresh"]))
    if kind == "iter":
        fields = [f" iteration {iteration}/{draw(megatron_number())}"]
        names = [
            "consumed samples",
            "elapsed time per iteration (ms)",
            "learning rate",
            "global batch size",
            "lm loss",
            "loss scale",
            "grad norm",
            "x",
        ]
        for name in draw(st.lists(st.sampled_from(names), max_size=6)):
            fields.append(f" {name}: {draw(megatron_number())}")
        return prefix + " |".join(fields) + " |"
    if kind == "valid":
        value = draw(megatron_number())
        return f" validation loss at iteration {iteration} | lm loss value: {value} |"
    if kind == "save":
        return f"saving checkpoint at iteration {iteration} to /ckpt"
    if kind == "saved":
        return f"{prefix}successfully saved checkpoint at iteration {iteration} to /ckpt"
    if kind == "load":
        return f" loading checkpoint from /ckpt at iteration {iteration}"
    if kind == "fresh":
        return "will not load any checkpoints"
    return draw(
        st.sampled_from(
            [
                f"exiting program at iteration {iteration}",
                "exiting program after receiving SIGTERM",
                "[after training is done] datetime: 2025-05-09 09:00:00",
                "received SIGTERM",
            ]
        )
    )


@st.composite
def megatron_run(draw: st.DrawFn) -> Source:
    import argparse
    import pickle

    source: Source = {}
    for n in range(draw(st.integers(1, 2))):
        lines = draw(st.lists(megatron_line(), min_size=1, max_size=25))
        lines.insert(0, " iteration 1/ 10 | consumed samples: 4 |")  # a detectable head
        source[f"logs/train-{n}.log"] = "\n".join(lines).encode()
    for n in draw(st.lists(st.integers(0, 10**8), max_size=3, unique=True)):
        args = argparse.Namespace(
            **draw(
                st.dictionaries(
                    st.sampled_from(
                        ["consumed_train_samples", "global_batch_size", "seed", "iteration"]
                    ),
                    st.one_of(st.integers(-(2**70), 2**70), st.floats(), st.none(), st.booleans()),
                )
            )
        )
        blob = draw(st.one_of(st.just(pickle.dumps({"args": args})), st.binary(max_size=32)))
        folder = draw(st.sampled_from([f"iter_{n:07d}", f"global_step{n}", "release"]))
        source[f"ckpt/{folder}/mp_rank_00/model_optim_rng.pt"] = blob
    if draw(st.booleans()):
        source["ckpt/latest_checkpointed_iteration.txt"] = draw(
            st.sampled_from([b"20", b"release", b"9" * 40, b"\xff\xfe", b""])
        )
    return source

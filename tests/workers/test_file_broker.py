"""The embedded broker hands every message to exactly one consumer, however producers and
consumers interleave: consumers poll the queue folder while many producers are writing to it."""

from __future__ import annotations

import multiprocessing
import threading
from multiprocessing.synchronize import Event
from pathlib import Path
from queue import Empty

import pytest
from kombu import Connection

from workers.file_broker import Transport

MESSAGES = 600
PRODUCERS = 6


def _connection(folder: Path, transport: object = Transport) -> Connection:
    return Connection(
        transport=transport,
        transport_options={
            "data_folder_in": str(folder / "queue"),
            "data_folder_out": str(folder / "queue"),
            "control_folder": str(folder / "control"),
        },
    )


def _consume(folder: str, out: multiprocessing.Queue, stop: Event) -> None:
    with _connection(Path(folder)) as conn, conn.SimpleQueue("jobs") as queue:
        while True:
            try:
                message = queue.get(timeout=0.05)
            except Empty:
                if stop.is_set():
                    return
                continue
            out.put(message.payload["n"])
            message.ack()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    for name in ("queue", "control"):
        (tmp_path / name).mkdir()
    return tmp_path


def test_every_message_reaches_one_consumer(folder: Path) -> None:
    context = multiprocessing.get_context("spawn")
    received: multiprocessing.Queue = context.Queue()
    stop = context.Event()
    consumers = [
        context.Process(target=_consume, args=(str(folder), received, stop)) for _ in range(3)
    ]
    for process in consumers:
        process.start()

    def produce(first: int) -> None:
        with _connection(folder) as conn, conn.SimpleQueue("jobs") as queue:
            for n in range(first, MESSAGES, PRODUCERS):
                queue.put({"n": n, "body": "x" * 20_000})  # large enough to be written in parts

    producers = [threading.Thread(target=produce, args=(i,)) for i in range(PRODUCERS)]
    for thread in producers:
        thread.start()
    for thread in producers:
        thread.join()
    seen = [received.get(timeout=60) for _ in range(MESSAGES)]
    stop.set()
    for process in consumers:
        process.join(timeout=30)
        assert process.exitcode == 0
    assert sorted(seen) == list(range(MESSAGES))
    assert received.empty()
    assert list((folder / "queue").iterdir()) == []


def test_a_message_being_written_is_not_taken(folder: Path) -> None:
    """A partly written message in the queue folder is invisible until renamed into place."""
    # (a queue name of its own: kombu keeps declared queues per process, not per folder)
    (folder / "queue" / f"{1:015d}_abc.partial.msg.partial").write_bytes(b'{"bod')
    with _connection(folder) as conn, conn.SimpleQueue("partial") as queue:
        with pytest.raises(Empty):
            queue.get(timeout=0.3)
        queue.put({"n": 1})
        assert queue.get(timeout=5).payload == {"n": 1}

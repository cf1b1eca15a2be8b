"""The embedded broker: kombu's file-system transport with atomic hand-over of messages.

kombu's transport writes a message into the queue folder under its final name and then fills
it, and a consumer takes whatever file carries a queue's name. A consumer polling in between
takes the empty file, fails to decode it and the message is gone (a job left queued until the
recovery sweep re-sends it, minutes later). Here a message is written under a name no consumer
matches and renamed into place once complete, and a consumer takes a message by renaming it
into its own folder beside the queue (same file system, so exactly one consumer wins).

The exchange tables (which queues an exchange routes to) had the same gap: a binding truncated
the table's file before writing it, so a producer publishing meanwhile read an empty table and
failed. Tables are now rewritten whole, under a lock of their own, and renamed into place. And
kombu records a binding in the process's memory before writing it to the table, so another
thread of the process (an API serving uploads at once) took it as bound and published to a
table that did not exist yet: the message was dropped without a word. Binding is now one step
per process.
"""

from __future__ import annotations

import fcntl
import os
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.transport.virtual import Empty
from kombu.utils.json import dumps, loads
from kombu.utils.objects import cached_property

PARTIAL = ".partial"  # a message still being written
TAKEN = "taken"  # the folder, beside the queue's, a consumer moves its message into


Binding = tuple[str, str, str]  # (routing key, pattern, queue), as kombu stores them


class Channel(filesystem.Channel):
    _binding = threading.Lock()  # per process, as kombu's record of bindings is

    def queue_bind(self, *args: Any, **kwargs: Any) -> Any:
        with self._binding:
            return super().queue_bind(*args, **kwargs)

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        binding = (routing_key or "", pattern or "", queue or "")
        self._update_table(exchange, lambda table: table if binding in table else [binding, *table])

    def _delete(
        self, queue: str, exchange: str, routing_key: str, pattern: str, *args: Any, **kwargs: Any
    ) -> None:
        super(filesystem.Channel, self)._delete(
            queue, exchange, routing_key, pattern, *args, **kwargs
        )
        binding = (routing_key or "", pattern or "", queue or "")
        self._update_table(exchange, lambda table: [b for b in table if b != binding])

    def _update_table(
        self, exchange: str, change: Callable[[list[Binding]], list[Binding]]
    ) -> None:
        file: Path = self._exchange_file(exchange)
        self.control_folder.mkdir(parents=True, exist_ok=True)
        try:
            with file.with_name(file.name + ".lock").open("a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    table = [tuple(b) for b in loads(file.read_text())]
                except FileNotFoundError:
                    table = []
                updated = change(table)
                if updated != table:
                    partial = file.with_name(file.name + PARTIAL)
                    partial.write_text(dumps(updated))
                    os.replace(partial, file)
        except OSError as exc:
            raise ChannelError(f"Cannot update {file}") from exc

    # (kombu's stubs give its base channel and its file-system channel different signatures)
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        name = f"{monotonic() * 1000:015.0f}_{uuid.uuid4()}.{queue}.msg"
        final = Path(self.data_folder_out) / name
        partial = final.with_name(name + PARTIAL)
        try:
            partial.write_bytes(dumps(payload).encode())
            os.replace(partial, final)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise ChannelError(f"Cannot add file {str(final)!r} to the queue folder") from exc

    def _get(self, queue: str, timeout: float | None = None) -> Any:
        wanted = f"{queue}.msg"
        folder = Path(self.data_folder_in)
        for name in sorted(os.listdir(folder)):
            if name.partition(".")[2] != wanted:
                continue
            mine = self._taken_folder / name
            try:
                os.replace(folder / name, mine)
            except FileNotFoundError:  # another consumer took it first
                continue
            try:
                payload = mine.read_bytes()
                mine.unlink()
            except OSError as exc:
                raise ChannelError(f"Cannot read file {str(mine)!r} from the queue") from exc
            return loads(payload.decode())
        raise Empty()

    @cached_property
    def _taken_folder(self) -> Path:
        path = Path(self.data_folder_in).parent / TAKEN
        path.mkdir(parents=True, exist_ok=True)
        return path


class Transport(filesystem.Transport):
    Channel = Channel

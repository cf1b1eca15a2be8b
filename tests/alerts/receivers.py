"""Real alert receivers on loopback: an HTTP server answering a scripted list of statuses, and an
SMTP server (aiosmtpd) keeping what it receives."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiosmtpd.controller import Controller

from tests.procs import free_port


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int
    at: float

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """Answers the i-th request with ``statuses[i]`` (then ``default``)."""

    statuses: list[int] = field(default_factory=list)
    default: int = 200
    requests: list[Received] = field(default_factory=list)
    url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _next_status(self) -> int:
        index = len(self.requests)
        return self.statuses[index] if index < len(self.statuses) else self.default

    def wait_for(
        self, done: Callable[[list[Received]], bool], timeout: float = 30
    ) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                seen = list(self.requests)
            if done(seen):
                return seen
            time.sleep(0.05)
        raise TimeoutError(f"receiver saw {len(self.requests)} request(s)")


@contextmanager
def http_receiver(statuses: list[int] | None = None, default: int = 200) -> Iterator[Receiver]:
    receiver = Receiver(list(statuses or []), default)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with receiver.lock:
                status = receiver._next_status()
                receiver.requests.append(
                    Received(self.path, dict(self.headers.items()), body, status, time.time())
                )
            payload = b"ok" if status < 300 else b"receiver says no"
            self.send_response(status)
            if 300 <= status < 400:
                self.send_header("Location", "http://127.0.0.1:9/elsewhere")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@dataclass
class Inbox:
    messages: list[EmailMessage] = field(default_factory=list)
    recipients: list[list[str]] = field(default_factory=list)
    host: str = "127.0.0.1"
    port: int = 0

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = message_from_bytes(envelope.content, policy=policy.default)
        assert isinstance(message, EmailMessage)
        self.messages.append(message)
        self.recipients.append(list(envelope.rcpt_tos))
        return "250 Message accepted for delivery"

    def wait_for(self, count: int, timeout: float = 30) -> list[EmailMessage]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.messages) >= count:
                return list(self.messages)
            time.sleep(0.05)
        raise TimeoutError(f"inbox holds {len(self.messages)} message(s)")


@contextmanager
def smtp_server() -> Iterator[Inbox]:
    inbox = Inbox(port=free_port())
    controller = Controller(inbox, hostname=inbox.host, port=inbox.port)
    controller.start()
    try:
        yield inbox
    finally:
        controller.stop()

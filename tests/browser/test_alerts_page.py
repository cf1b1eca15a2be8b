"""The alerts page in headless Chromium: an alert raised on megatron_offset, delivered to a
webhook on loopback, shows with its delivery state; the channel's test button sends a test."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import ARTIFACTS, Served, problems
from tests.procs import runwatch

pytestmark = pytest.mark.integration


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A webhook receiver on loopback that records each request's event header and body."""
    seen: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            seen.append({"event": self.headers.get("x-runwatch-event"), "body": json.loads(body)})
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/hook", seen
    server.shutdown()
    server.server_close()


def test_alerts_page_shows_delivery_and_sends_a_test(
    served: Served, page: Page, receiver: tuple[str, list[dict[str, Any]]]
) -> None:
    url, seen = receiver
    api = httpx.Client(base_url=served.base, headers={"Authorization": f"Bearer {served.token}"})
    channel = api.post(
        "/api/v1/alerts/channels",
        json={"name": "ops-hook", "kind": "webhook", "url": url, "secret": "s3cret"},
    )
    assert channel.status_code == 201, channel.text
    rule = api.post(
        "/api/v1/alerts/rules",
        json={"project": "examples", "channel": "ops-hook", "min_severity": "critical"},
    )
    assert rule.status_code == 201, rule.text
    analysed = runwatch("analyze", "examples/megatron_offset", env=served.env)
    assert analysed.returncode == 0, analysed.stderr
    deadline = time.monotonic() + 60
    while not seen and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [s["event"] for s in seen] == ["alert"], seen

    page.goto(served.base + "/alerts")
    table = page.locator("#alerts-table")
    expect(table).to_contain_text("resume_data_drift")
    expect(table).to_contain_text("ops-hook: sent after 1 attempt(s)")
    expect(table.get_by_role("link", name="examples/megatron_offset")).to_be_visible()
    page.get_by_role("button", name="Send test").click()
    expect(page.locator("#alerts-test-result")).to_have_text("Test message sent through ops-hook.")
    assert [s["event"] for s in seen] == ["alert", "test"]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "alerts.png"), full_page=True)
    assert problems(page) == []

"""A served Runwatch with example runs in it, and a headless Chromium driven by Playwright.

Chromium is Debian's (``/usr/bin/chromium``, or ``RUNWATCH_CHROMIUM``); scripts/test installs it
when missing. Screenshots go to ``artifacts/`` at the top of the repository.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.procs import background, free_port, runwatch, runwatch_env, wait_http

ARTIFACTS = Path(__file__).parents[2] / "artifacts"
EXAMPLES = ("megatron_offset", "stall_on_save", "exact_resume", "clean")
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    path = os.environ.get("RUNWATCH_CHROMIUM") or shutil.which("chromium")
    if not path:
        raise RuntimeError("Chromium is required for the browser tests: apt-get install chromium")
    return path


@dataclass(frozen=True)
class Served:
    base: str
    token: str  # the embedded default's admin token, as `runwatch serve` announced it
    env: dict[str, str]  # for `runwatch` commands against the same store


@pytest.fixture(scope="session")
def served(tmp_path_factory: pytest.TempPathFactory, example_runs: Path) -> Iterator[Served]:
    """``runwatch serve`` (API + dashboard + embedded worker) with example runs ingested."""
    home = tmp_path_factory.mktemp("dash") / "home"
    env = runwatch_env(home=str(home), webhook_allow_private="true")  # alerts to loopback
    runs = [str(example_runs / name) for name in EXAMPLES]
    result = runwatch("ingest", *runs, "--project", "examples", "--wait", env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    hostile = example_runs.parent / "hostile"
    shutil.copytree(example_runs / "clean", hostile)
    named = runwatch(
        "ingest",
        str(hostile),
        "--project",
        "examples",
        "--run",
        "<img src=x onerror=alert(1)>",
        "--wait",
        env=env,
    )
    assert named.returncode == 0, named.stderr
    port = free_port()
    log = home.parent / "serve.log"
    with background(["serve", "--port", str(port)], env, log) as proc:
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/api/v1/health", proc, log)
        token = (home / "admin-token").read_text().strip()
        assert f"Admin token in {home / 'admin-token'}" in log.read_text()
        yield Served(base, token, env)


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=chromium_path(), headless=True, args=CHROMIUM_FLAGS
        )
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser, served: Served) -> Iterator[Page]:
    """A logged-in page (through ``/login?token=``, as the link ``runwatch serve`` prints) that
    records console errors and failed requests; tests assert there were none."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    login = context.request.get(f"{served.base}/login?token={served.token}", max_redirects=0)
    assert login.status == 303, login.text()
    tab = context.new_page()
    problems: list[str] = []
    tab.on(
        "console",
        lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None,
    )
    tab.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    tab.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
    tab.problems = problems  # type: ignore[attr-defined]
    yield tab
    context.close()


def problems(page: Page) -> list[Any]:
    return list(page.problems)  # type: ignore[attr-defined]

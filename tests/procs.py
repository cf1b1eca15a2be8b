"""Real processes for integration tests: the ``runwatch`` CLI, workers and the API server."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx


def runwatch_env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNWATCH_")}
    env.update({f"RUNWATCH_{k.upper()}": v for k, v in settings.items()})
    env["PYTHONUNBUFFERED"] = "1"
    return env


def runwatch(
    *args: str, env: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@contextmanager
def background(
    args: list[str], env: dict[str, str], log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``python -m app ARGS`` and stop exactly that process (and its children) afterwards."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            yield proc
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {timeout} s:\n{log.read_text()}")


def wait_for_log(
    log: Path, needle: str, proc: subprocess.Popen[bytes], timeout: float = 60
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if needle in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}:\n{log.read_text()}")
        time.sleep(0.2)
    raise TimeoutError(f"'{needle}' not in log after {timeout} s:\n{log.read_text()}")


@contextmanager
def workers(env: dict[str, str], logs: list[Path]) -> Iterator[None]:
    """One ``runwatch worker`` per log file, each ready before the block starts."""
    with ExitStack() as stack:
        for log in logs:
            proc = stack.enter_context(background(["worker", "--loglevel", "INFO"], env, log))
            wait_for_log(log, "ready", proc)
        yield

"""Private servers the reliability tests may stop and start: a PostgreSQL cluster and a Redis,
each on its own free port in its own temporary directory, never the shared ones. And the
worker processes they kill."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.procs import free_port


def _pg_bindir() -> Path:
    found = shutil.which("pg_ctl")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
    if not versions:
        raise RuntimeError("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    return Path(versions[-1])


class PrivatePostgres:
    """``initdb`` into a temporary directory, then ``start()`` / ``stop()`` at will. PostgreSQL
    refuses to run as root: as root, the cluster belongs to the ``postgres`` user."""

    def __init__(self) -> None:
        self.bindir = _pg_bindir()
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="runwatch-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._as: list[str] = []
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync")

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        done = subprocess.run(
            [*self._as, str(self.bindir / tool), *args], capture_output=True, text=True, timeout=60
        )
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed: {done.stdout}{done.stderr}")

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.root}"
            " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")

    def stop(self) -> None:
        """``pg_ctl stop -m fast``: open sessions are ended, as in an outage."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def close(self) -> None:
        with suppress(RuntimeError):  # already stopped
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres()
    try:
        server.start()
        yield server
    finally:
        server.close()


class PrivateRedis:
    """``redis-server`` without persistence: a restart loses every queued message."""

    def __init__(self) -> None:
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="runwatch-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        with (self.root / "redis.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    *("redis-server", "--port", str(self.port), "--bind", "127.0.0.1"),
                    *("--save", "", "--appendonly", "no", "--dir", str(self.root)),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        client.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)
        self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@contextmanager
def private_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis()
    try:
        server.start()
        yield server
    finally:
        server.close()


@dataclass
class Workers:
    """``runwatch worker`` processes, each in its own process group (with its beat, if any),
    that a test may kill and start again. ``stop_all`` ends exactly these."""

    env: dict[str, str]
    logs: Path
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    starts: int = 0

    def start(self, index: int, *extra: str) -> subprocess.Popen[bytes]:
        self.starts += 1
        self.logs.mkdir(parents=True, exist_ok=True)
        with (self.logs / f"worker-{index}.log").open("ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "app", "worker", "--loglevel", "INFO", *extra],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs[index] = proc
        return proc

    def pid_index(self) -> dict[int, int]:
        return {p.pid: i for i, p in self.procs.items() if p.poll() is None}

    def kill(self, index: int) -> None:
        """SIGKILL the worker and everything it started, as a crashed machine would."""
        proc = self.procs[index]
        _signal_group(proc, signal.SIGKILL)
        proc.wait(timeout=20)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            _signal_group(proc, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()

    def log_text(self, tail: int | None = None) -> str:
        """The workers' logs, each cut to its last ``tail`` characters if given."""
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-(tail or 0) :]}"
            for p in sorted(self.logs.glob("*.log"))
        )


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Signal the process group ``proc`` leads (it was started in a new session)."""
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


@contextmanager
def workers(env: dict[str, str], logs: Path) -> Iterator[Workers]:
    pool = Workers(env, logs)
    try:
        yield pool
    finally:
        pool.stop_all()

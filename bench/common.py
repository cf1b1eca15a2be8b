"""What every benchmark shares: measuring a function in a fresh child process (its wall time and
peak RSS), throw-away PostgreSQL databases, and a description of the machine."""

from __future__ import annotations

import json
import os
import platform
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PG_ADMIN_URL = os.environ.get(
    "RUNWATCH_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


@dataclass
class Scale:
    """Sizes of every input; ``quick`` divides them for a smoke test."""

    quick: bool = False
    metric_steps: int = 1_000_000
    mlflow_points: int = 200_000  # MLflow's prefix, extrapolated to the full log
    import_points: int = 1_000_000
    trace_steps: int = 100_000
    trace_batch: int = 1_024
    dashboard_requests: int = 20
    wrk_seconds: int = 10
    wrk_connections: int = 32
    telemetry_nodes: int = 125
    telemetry_cycles: int = 5

    @classmethod
    def make(cls, quick: bool) -> Scale:
        if not quick:
            return cls()
        return cls(
            quick=True,
            metric_steps=10_000,
            mlflow_points=5_000,
            import_points=20_000,
            trace_steps=1_000,
            trace_batch=1_024,
            dashboard_requests=5,
            wrk_seconds=2,
            wrk_connections=8,
            telemetry_nodes=10,
            telemetry_cycles=2,
        )


@dataclass
class Row:
    """One line of the table: Runwatch's number, the baseline's, and the target."""

    benchmark: str
    runwatch: str
    baseline: str = "-"
    ratio: float | None = None  # > 1: Runwatch is that many times better
    target: str = "-"
    met: bool | None = None
    details: dict[str, Any] = field(default_factory=dict)


def in_child(target: str, timeout: float = 3600, **kwargs: Any) -> dict[str, Any]:
    """Run ``module:function(**kwargs)`` in a fresh interpreter; its result (a JSON object) plus
    ``peak_rss_mb`` (the child's own peak resident memory, interpreter and imports included)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "bench.child", target, json.dumps(kwargs), str(out)]
        proc = subprocess.run(cmd, timeout=timeout, capture_output=True, text=True)
        if proc.returncode != 0 or not out.exists():
            tail = (proc.stderr or proc.stdout)[-3000:]
            raise RuntimeError(f"{target} failed (exit {proc.returncode}):\n{tail}")
        result: dict[str, Any] = json.loads(out.read_text())
        return result


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Timer:
    """Wall-clock seconds of named phases: ``with timer("parse"): ...``; repeats add up."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started

    def wrap(self, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self(name):
                return func(*args, **kwargs)

        return timed


def pg_available() -> bool:
    from sqlalchemy import create_engine, text

    try:
        engine = create_engine(PG_ADMIN_URL, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
        return True
    except Exception:
        return False


@contextmanager
def pg_database(prefix: str = "runwatch_bench") -> Iterator[str]:
    """A new, empty PostgreSQL database (SQLAlchemy URL), dropped afterwards."""
    from sqlalchemy import create_engine, text

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"),
                {"n": name},
            )
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()


def machine() -> dict[str, Any]:
    """Cores, memory, CPU model, load, Python and database versions."""
    info: dict[str, Any] = {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    try:
        with open("/proc/meminfo") as f:
            kib = int(f.readline().split()[1])
        info["memory_gib"] = round(kib / 1024 / 1024, 1)
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if "model name" in ln), None)
        info["cpu"] = model
    except (OSError, ValueError, IndexError):
        pass
    if pg_available():
        from sqlalchemy import create_engine, text

        engine = create_engine(PG_ADMIN_URL)
        with engine.connect() as conn:
            info["postgresql"] = conn.execute(text("SHOW server_version")).scalar()
        engine.dispose()
    return info


def fmt_rate(points_per_s: float) -> str:
    if points_per_s >= 1e6:
        return f"{points_per_s / 1e6:.2f}M pts/s"
    if points_per_s >= 1e3:
        return f"{points_per_s / 1e3:.1f}k pts/s"
    return f"{points_per_s:.0f} pts/s"


def fmt_seconds(seconds: float) -> str:
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s"

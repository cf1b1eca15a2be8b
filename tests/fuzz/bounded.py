"""Ingest a hostile source in a fresh process and measure it: the job's outcome, its wall time
and how far the process's peak memory (RSS) rose while the job ran. A runaway input costs a
child process, not the test session."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.procs import runwatch_env

REPO = Path(__file__).resolve().parents[2]
_CHILD = "import json, sys; from tests.fuzz.bounded import child; child(sys.argv[1])"


def ingest_bounded(path: Path, home: Path, *, seconds: float, **settings: Any) -> dict[str, Any]:
    """Ingest ``path`` (a SQLite database under ``home``, ``settings`` overriding the defaults)
    in a child process killed after ``seconds`` more than it needs to start."""
    request = json.dumps({"path": str(path), "home": str(home), "settings": settings})
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, request],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
        cwd=REPO,
        env=runwatch_env(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def child(request_text: str) -> None:
    from app import migrate
    from app.config import Settings
    from app.db import make_engine
    from tests.helpers import ingest_path

    request = json.loads(request_text)
    home = Path(request["home"])
    home.mkdir(parents=True, exist_ok=True)
    settings = Settings(
        home=home, database_url=f"sqlite:///{home / 'runwatch.db'}", **request["settings"]
    )
    engine = make_engine(settings.sqlalchemy_url)
    migrate.upgrade(engine)
    warm = home / "warm-up.jsonl"  # imports and caches of a first job are not the input's
    warm.write_text('{"step": 1, "loss": 1.0}\n{"step": 2, "loss": 0.5}\n')
    ingest_path(engine, settings, warm, run="warm-up")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    job = ingest_path(engine, settings, Path(request["path"]), run="hostile")
    seconds = time.monotonic() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    outcome = {
        "state": job.state,
        "error": job.error,
        "warnings": job.warnings,
        "counts": job.counts,
        "seconds": seconds,
        "rss_growth_mb": (peak - before) / 1024,
    }
    print(json.dumps(outcome))

"""`runwatch demo` trains the scenarios on the spot and ingests them through a worker process."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from app.db import make_engine, session_scope
from app.demo import SCENARIOS
from app.models import IngestJob, Run
from app.services.tokens import authenticate
from tests.procs import runwatch, runwatch_env

pytestmark = pytest.mark.integration


def test_demo_trains_and_ingests_every_scenario(tmp_path: Path) -> None:
    home = tmp_path / "home"
    result = runwatch("demo", "--no-serve", env=runwatch_env(home=str(home)), timeout=600)
    assert result.returncode == 0, result.stderr
    for name in SCENARIOS:
        assert f"trained {name}" in result.stdout
    token_file = home / "admin-token"
    secret = token_file.read_text().strip()
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert (
        f"Admin token in {token_file} - log in to the dashboard at http://127.0.0.1:8765/login"
        " with it" in result.stdout.splitlines()
    )
    assert secret not in result.stdout + result.stderr
    engine = make_engine(f"sqlite:///{home / 'runwatch.db'}")
    with session_scope(engine) as session:
        jobs = session.scalars(select(IngestJob)).all()
        assert [j.state for j in jobs] == ["succeeded"] * len(SCENARIOS)
        runs = {r.name: r for r in session.scalars(select(Run))}
    assert set(runs) == set(SCENARIOS)
    assert runs["clean"].num_segments == 1
    assert runs["double_resume"].num_segments == 3
    assert runs["exact_resume"].status == "finished"
    with session_scope(engine) as session:
        admin = authenticate(session=session, secret=secret)
        assert admin is not None and admin.scope == "admin" and admin.project_id is None
    engine.dispose()

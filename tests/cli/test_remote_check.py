"""`runwatch check --server URL` as a CI job runs it: against a served Runwatch, with a token
from the environment, the same exit codes and JSON as the local check."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.db import make_engine, session_scope
from app.services.tokens import create_token
from tests.procs import background, free_port, runwatch, runwatch_env, wait_http

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, example_runs: Path
) -> Iterator[dict[str, str]]:
    """A served Runwatch holding two example runs, and read tokens for its project and another."""
    root = tmp_path_factory.mktemp("remote")
    env = runwatch_env(home=str(root / "home"))
    runs = [str(example_runs / n) for n in ("megatron_offset", "exact_resume")]
    result = runwatch("ingest", *runs, "--project", "ci", "--wait", env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    engine = make_engine(f"sqlite:///{root / 'home' / 'runwatch.db'}")
    with session_scope(engine) as session:
        _, token = create_token(session=session, name="ci", scope="read", project="ci")
        _, other = create_token(session=session, name="other", scope="read", project="other")
    engine.dispose()
    port = free_port()
    with background(["serve", "--no-worker", "--port", str(port)], env, root / "serve.log") as proc:
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/api/v1/health", proc, root / "serve.log")
        client_env = runwatch_env(home=str(root / "client-home"))  # no access to the store
        yield {
            **client_env,
            "RUNWATCH_SERVER": base,
            "RUNWATCH_TOKEN": token,
            "OTHER_TOKEN": other,
        }


def test_remote_check_exit_codes_follow_the_verdict(server: dict[str, str]) -> None:
    assert runwatch("check", "ci/exact_resume", "--fail-on", "warning", env=server).returncode == 0
    failed = runwatch("check", "ci/megatron_offset", env=server)
    assert failed.returncode == 1
    assert "fail" in failed.stdout and "Resume from checkpoint step_000300" in failed.stdout


def test_remote_check_json_and_checkpoint_gate(server: dict[str, str]) -> None:
    safe = runwatch("check", "megatron_offset", "--checkpoint", "300", "--json", env=server)
    summary = json.loads(safe.stdout)
    assert summary["verdict"] == "fail" and summary["passed"] is False and safe.returncode == 1
    assert summary["checkpoint"] == {
        "name": "step_000300",
        "step": 300,
        "safe": True,
        "reasons": [],
    }
    clean = runwatch("check", "exact_resume", "--checkpoint", "step_000400", env=server)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    after_drift = runwatch(
        "check",
        "megatron_offset",
        "--fail-on",
        "critical",
        "--checkpoint",
        "step_000400",
        "--json",
        env=server,
    )
    detail = json.loads(after_drift.stdout)["checkpoint"]
    assert after_drift.returncode == 1 and detail["safe"] is False and detail["reasons"]


def test_remote_check_usage_errors_say_why(server: dict[str, str]) -> None:
    missing = runwatch("check", "ci/no_such_run", env=server)
    assert missing.returncode == 2 and "no run named 'ci/no_such_run'" in missing.stderr
    no_ckpt = runwatch("check", "exact_resume", "--checkpoint", "step_999", env=server)
    assert no_ckpt.returncode == 2 and "step_999" in no_ckpt.stderr
    wrong = runwatch("check", "exact_resume", env={**server, "RUNWATCH_TOKEN": "rwt_nope"})
    assert wrong.returncode == 2 and "401" in wrong.stderr
    other = runwatch("check", "1", env={**server, "RUNWATCH_TOKEN": server["OTHER_TOKEN"]})
    assert other.returncode == 2 and "403" in other.stderr
    down = runwatch("check", "1", "--server", f"http://127.0.0.1:{free_port()}", env=server)
    assert down.returncode == 2 and "cannot reach" in down.stderr

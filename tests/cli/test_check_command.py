"""`runwatch check` and `runwatch findings` as a CI pipeline calls them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.procs import runwatch, runwatch_env

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, example_runs: Path) -> dict[str, str]:
    home = tmp_path_factory.mktemp("check") / "home"
    env = runwatch_env(home=str(home))
    runs = [str(example_runs / n) for n in ("exact_resume", "scheduler_reset", "fresh_seed")]
    result = runwatch("ingest", *runs, "--project", "ci", "--wait", env=env)
    assert result.returncode == 0, result.stderr
    return env


@pytest.mark.parametrize(
    ("run", "fail_on", "code"),
    [
        ("exact_resume", "critical", 0),
        ("exact_resume", "warning", 0),
        ("scheduler_reset", "critical", 0),
        ("scheduler_reset", "warning", 1),
        ("ci/fresh_seed", "critical", 1),
        ("3", "warning", 1),
    ],
)
def test_exit_code_follows_the_verdict(
    env: dict[str, str], run: str, fail_on: str, code: int
) -> None:
    result = runwatch("check", run, "--fail-on", fail_on, env=env)
    assert result.returncode == code, result.stdout + result.stderr


def test_unknown_run_and_bad_option_are_usage_errors(env: dict[str, str]) -> None:
    assert runwatch("check", "no_such_run", env=env).returncode == 2
    assert runwatch("check", "999", env=env).returncode == 2
    assert runwatch("check", "exact_resume", "--fail-on", "info", env=env).returncode == 2


def test_check_json_gives_the_verdict_suspects_and_checkpoints(env: dict[str, str]) -> None:
    result = runwatch("check", "fresh_seed", "--json", env=env)
    summary = json.loads(result.stdout)
    assert summary["verdict"] == "fail" and summary["passed"] is False
    (suspect,) = summary["suspect_resumes"]
    assert suspect["resume_from_step"] == 500
    assert suspect["repair"]["checkpoint"] == "step_000500"
    assert suspect["repair"]["advice"].startswith(
        "Resume from checkpoint step_000500 with epoch 8, position 1,664, seed 1234"
    )
    safety = {c["step"]: c["verdict"] for c in summary["checkpoints"]}
    assert safety[500] == "safe" and safety[600] == "unsafe"


def test_findings_lists_warnings_and_json(env: dict[str, str]) -> None:
    human = runwatch("findings", "scheduler_reset", env=env)
    assert "lr_discontinuity" in human.stdout and "restarted its warm-up" in human.stdout
    data = json.loads(runwatch("findings", "exact_resume", "--json", env=env).stdout)
    assert data["verdict"] == "pass"
    assert [f["kind"] for f in data["findings"]] == ["resume_ok"]

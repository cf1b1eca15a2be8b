"""Seeds for the fuzz tests (written once per session), and the count of inputs tried.

``RUNWATCH_FUZZ_EXAMPLES=2000 python -m pytest tests/fuzz`` runs a long local fuzz; the counts
are printed at the end and, with ``RUNWATCH_FUZZ_REPORT=path.json``, written there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.fuzz import harness, seeds


@pytest.fixture(scope="session")
def run_seeds(example_runs: Path) -> list[seeds.Source]:
    base = seeds.run_directory(example_runs / "exact_resume")
    other = seeds.run_directory(example_runs / "megatron_offset", lines=25)
    return [base, other, *seeds.loader_state_runs(base)[:4]]


@pytest.fixture(scope="session")
def loader_seeds(example_runs: Path) -> list[seeds.Source]:
    return seeds.loader_state_runs(seeds.run_directory(example_runs / "exact_resume", lines=5))


@pytest.fixture(scope="session")
def tensorboard_seeds(tmp_path_factory: pytest.TempPathFactory) -> list[seeds.Source]:
    return seeds.tensorboard(tmp_path_factory.mktemp("tb-seeds"))


@pytest.fixture(scope="session")
def wandb_seeds(tmp_path_factory: pytest.TempPathFactory) -> list[seeds.Source]:
    return seeds.wandb(tmp_path_factory.mktemp("wandb-seeds"))


@pytest.fixture(scope="session")
def hf_seeds(tmp_path_factory: pytest.TempPathFactory) -> list[seeds.Source]:
    return seeds.hf_trainer(tmp_path_factory.mktemp("hf-seeds"))


@pytest.fixture(scope="session")
def megatron_seeds(tmp_path_factory: pytest.TempPathFactory) -> list[seeds.Source]:
    return seeds.megatron(tmp_path_factory.mktemp("megatron-seeds"))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not harness.TRIED:
        return
    terminalreporter.section("fuzz inputs tried")
    for line in harness.report():
        terminalreporter.write_line(line)
    path = os.environ.get("RUNWATCH_FUZZ_REPORT")
    if path:
        counts = {
            reader: {
                "tried": harness.TRIED[reader],
                "parsed": harness.OUTCOMES[reader, "parsed"],
                "refused": harness.OUTCOMES[reader, "refused"],
            }
            for reader in sorted(harness.TRIED)
        }
        Path(path).write_text(json.dumps(counts, indent=2) + "\n")

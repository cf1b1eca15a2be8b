from __future__ import annotations

from pathlib import Path

import pytest

from scripts.corpus.generate import generate_corpus


@pytest.fixture(scope="session")
def quick_corpus(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The small labelled torch corpus, trained once per test session (about 15 s)."""
    return generate_corpus(tmp_path_factory.mktemp("corpus"), quick=True, seed=3)

"""A labelled corpus of real torch training runs with injected resume faults.

``generate_corpus(out_dir, runs=..., seed=..., quick=...)`` writes run directories in Runwatch's
format, each with a ``truth.json``; ``python -m scripts.corpus.generate OUT_DIR`` does the same.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    # Imported lazily so that ``python -m scripts.corpus.generate`` does not import it twice.
    if name == "generate_corpus":
        from scripts.corpus.generate import generate_corpus

        return generate_corpus
    raise AttributeError(name)

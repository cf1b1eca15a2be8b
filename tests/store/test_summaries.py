"""Epoch summaries survive their blob exactly."""

from __future__ import annotations

import numpy as np

from app.analysis.coverage_parts import summarize_epochs
from app.analysis.epochs import plan_epochs
from app.store.summaries import decode_summaries, encode_summaries
from tests.analysis.synth import build_run


def test_summaries_round_trip() -> None:
    run = build_run(fault="fresh_seed")
    assert run.trace is not None
    plan = plan_epochs(run)
    assert plan is not None
    summaries = summarize_epochs(run.trace, plan, range(6), int(run.trace.steps[-1]))
    decoded = decode_summaries(encode_summaries(summaries))
    assert len(decoded) == len(summaries)
    for got, want in zip(decoded, summaries, strict=True):
        assert got.coverage == want.coverage
        for a, b in zip(got.grid, want.grid, strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b)
        assert np.array_equal(got.unseen, want.unseen)
        assert np.array_equal(got.repeated, want.repeated)
        assert got.head.dtype == np.int64 and np.array_equal(got.head, want.head)
    assert decode_summaries(encode_summaries([])) == []

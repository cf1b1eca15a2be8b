"""Every reader on whole sources built from their parts (valid framing and checksums, plausible
records with hostile values mixed in): a parsed run or a clear error, never a crash or a hang."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.ingest.data_state import position_from_state
from tests.fuzz import harness, structures
from tests.fuzz.seeds import Source


@harness.fuzz_settings()
@given(structures.run_directory())
def test_run_directory(source: Source) -> None:
    harness.read_files("run_directory", source)


@harness.fuzz_settings()
@given(structures.wandb_run())
def test_wandb(source: Source) -> None:
    harness.read_files("wandb", source)


@harness.fuzz_settings()
@given(structures.tensorboard_run())
def test_tensorboard(source: Source) -> None:
    harness.read_files("tensorboard", source)


@harness.fuzz_settings()
@given(structures.hf_run())
def test_hf_trainer(source: Source) -> None:
    harness.read_files("hf_trainer", source)


@harness.fuzz_settings()
@given(structures.megatron_run())
def test_megatron(source: Source) -> None:
    harness.read_files("megatron", source)


@harness.fuzz_settings()
@given(structures.loader_state(), st.one_of(st.none(), st.integers(-4, 2**40)))
def test_loader_state_positions(state: object, batch_size: int | None) -> None:
    """Any JSON as a loader state: a position (of whole numbers) or None, never an error."""
    harness.TRIED["data_state"] += 1
    with harness.time_bound():
        position = position_from_state(state, batch_size=batch_size)  # type: ignore[arg-type]
    harness.OUTCOMES["data_state", "parsed" if position is not None else "refused"] += 1
    if position is not None:
        for value in (position.epoch, position.consumed_in_epoch, position.seed):
            assert value is None or type(value) is int

"""Every reader on damaged copies of valid files: a parsed run or a clear error, never a crash,
never a hang (see :mod:`tests.fuzz.harness` for the property)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import harness
from tests.fuzz.mutate import mutated_source
from tests.fuzz.seeds import Source

TEXT = (".jsonl", ".json", ".log", ".txt")


def _check(reader: str, data: st.DataObject, seeds: list[Source]) -> None:
    source = data.draw(mutated_source(seeds, text=TEXT))
    harness.read_files(reader, source)


def test_run_directory(run_seeds: list[Source]) -> None:
    @harness.fuzz_settings()
    @given(st.data())
    def fuzz(data: st.DataObject) -> None:
        _check("run_directory", data, run_seeds)

    fuzz()


def test_loader_states(loader_seeds: list[Source]) -> None:
    @harness.fuzz_settings(0.5)
    @given(st.data())
    def fuzz(data: st.DataObject) -> None:
        _check("data_state", data, loader_seeds)

    fuzz()


def test_tensorboard(tensorboard_seeds: list[Source]) -> None:
    @harness.fuzz_settings()
    @given(st.data())
    def fuzz(data: st.DataObject) -> None:
        _check("tensorboard", data, tensorboard_seeds)

    fuzz()


def test_wandb(wandb_seeds: list[Source]) -> None:
    @harness.fuzz_settings()
    @given(st.data())
    def fuzz(data: st.DataObject) -> None:
        _check("wandb", data, wandb_seeds)

    fuzz()


def test_hf_trainer(hf_seeds: list[Source]) -> None:
    @harness.fuzz_settings()
    @given(st.data())
    def fuzz(data: st.DataObject) -> None:
        _check("hf_trainer", data, hf_seeds)

    fuzz()


def test_megatron(megatron_seeds: list[Source]) -> None:
    @harness.fuzz_settings()
    @given(st.data())
    def fuzz(data: st.DataObject) -> None:
        _check("megatron", data, megatron_seeds)

    fuzz()

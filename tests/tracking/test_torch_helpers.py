"""Recorded sample ids must be exactly what each optimizer step's batches contained."""

from __future__ import annotations

import json
import multiprocessing
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    RandomSampler,
    Sampler,
    TensorDataset,
)

from app.tracking import RecordingSampler, RunLogger, SampleIdDataset, StepRecorder

SIZE = 64


def values_dataset() -> TensorDataset:
    """Item i holds the value 1000 + i, so a batch shows which indices it came from."""
    return TensorDataset(torch.arange(SIZE) + 1000)


def batch_ids(batch: list[torch.Tensor]) -> list[int]:
    return (batch[0] - 1000).tolist()


def logged(run: Path) -> dict[int, list[int]]:
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    return {row["step"]: row["sample_ids"] for row in rows}


def test_sampler_records_each_step_with_gradient_accumulation(tmp_path: Path) -> None:
    sampler = RecordingSampler(RandomSampler(range(SIZE), generator=torch.Generator()))
    loader = DataLoader(values_dataset(), batch_size=4, sampler=sampler)
    consumed: dict[int, list[int]] = {}
    with RunLogger(tmp_path) as log:
        batches = iter(loader)
        for step in range(1, 6):
            consumed[step] = [i for _ in range(3) for i in batch_ids(next(batches))]
            sampler.record_step(log, step)
    assert logged(tmp_path) == consumed
    assert all(len(ids) == 12 for ids in consumed.values())


def test_batch_sampler_is_recorded_and_forwarded() -> None:
    inner = BatchSampler(range(10), batch_size=4, drop_last=False)
    sampler = RecordingSampler(inner)
    loader = DataLoader(values_dataset(), batch_sampler=sampler)
    assert len(sampler) == 3 and sampler.batch_size == 4
    assert [batch_ids(b) for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert sampler.take() == list(range(10))
    copy = pickle.loads(pickle.dumps(sampler))  # deep copies and spawned processes work
    assert [len(b) for b in copy] == [4, 4, 2] and copy.take() == list(range(10))


def test_sampler_runs_ahead_of_training_with_workers() -> None:
    """Why the sampler is the wrong place to record with workers: it is asked for indices
    before the training loop receives them. ``count`` or SampleIdDataset fix it."""
    sampler = RecordingSampler(RandomSampler(range(SIZE), generator=torch.Generator()))
    loader = DataLoader(values_dataset(), batch_size=4, sampler=sampler, num_workers=2)
    batches = iter(loader)
    first = batch_ids(next(batches))
    second = batch_ids(next(batches))
    assert sampler.take(count=4) == first  # exact when told how much was consumed
    ahead = sampler.take()
    assert ahead[:4] == second and len(ahead) > 4  # prefetched batches nobody trained on yet
    del batches


@pytest.mark.parametrize("workers", [0, 2])
def test_sample_id_dataset_is_exact_with_workers(tmp_path: Path, workers: int) -> None:
    dataset = SampleIdDataset(values_dataset())
    loader = DataLoader(
        dataset, batch_size=4, shuffle=True, num_workers=workers, generator=torch.Generator()
    )
    consumed: dict[int, list[int]] = {}
    with RunLogger(tmp_path) as log:
        recorder = StepRecorder(log)
        for micro, (ids, batch) in enumerate(loader, start=1):
            assert ids.tolist() == batch_ids(batch)
            recorder.add(ids)
            step = (micro + 1) // 2  # two micro-batches per optimizer step
            consumed.setdefault(step, []).extend(ids.tolist())
            if micro % 2 == 0:
                recorder.record(step)
    assert logged(tmp_path) == consumed
    assert sorted(i for ids in consumed.values() for i in ids) == list(range(SIZE))


def test_distributed_sampler_epochs_and_ranks(tmp_path: Path) -> None:
    seen: dict[int, list[list[int]]] = {}
    for rank in (0, 1):
        sampler = RecordingSampler(DistributedSampler(range(SIZE), num_replicas=2, rank=rank))
        loader = DataLoader(values_dataset(), batch_size=8, sampler=sampler)
        for epoch in (0, 1):
            sampler.set_epoch(epoch)  # forwarded
            contents = [i for batch in loader for i in batch_ids(batch)]
            assert sampler.take() == contents
            seen.setdefault(epoch, []).append(contents)
    for epoch in (0, 1):
        assert sorted(seen[epoch][0] + seen[epoch][1]) == list(range(SIZE))
    assert seen[0][0] != seen[1][0]  # set_epoch reached the sampler: a new order


class ResumableSampler(Sampler[int]):
    """A seeded shuffle that can restart mid-epoch from its ``state_dict``."""

    def __init__(self, size: int, seed: int) -> None:
        self.size, self.seed = size, seed
        self.epoch, self.consumed = 0, 0

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.randperm(self.size, generator=generator).tolist()
        for index in order[self.consumed :]:
            self.consumed += 1
            yield index
        self.epoch, self.consumed = self.epoch + 1, 0

    def __len__(self) -> int:
        return self.size - self.consumed

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "consumed": self.consumed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.consumed = state["epoch"], state["consumed"]


def train(
    run: Path, steps: range, state: dict[str, int] | None
) -> tuple[dict[int, list[int]], dict[str, int]]:
    """Steps of 8 samples; returns what each step's batch held and the sampler state at the end."""
    sampler = RecordingSampler(ResumableSampler(SIZE, seed=5))
    if state is not None:
        sampler.load_state_dict(state)  # forwarded
    loader = DataLoader(values_dataset(), batch_size=8, sampler=sampler)
    held: dict[int, list[int]] = {}
    with RunLogger(run) as log:
        batches = iter(loader)
        for step in steps:
            try:
                batch = next(batches)
            except StopIteration:
                batches = iter(loader)
                batch = next(batches)
            held[step] = batch_ids(batch)
            sampler.record_step(log, step)
    return held, sampler.state_dict()


def test_resume_through_sampler_state_records_what_batches_held(tmp_path: Path) -> None:
    straight, _ = train(tmp_path / "straight", range(1, 13), None)
    _, state = train(tmp_path / "run", range(1, 6), None)
    assert state == {"epoch": 0, "consumed": 40}
    resumed, _ = train(tmp_path / "run", range(6, 13), state)
    assert logged(tmp_path / "run") == straight
    assert resumed == {step: straight[step] for step in range(6, 13)}


def test_resume_random_sampler_by_skipping_batches(tmp_path: Path) -> None:
    """The usual resume of a plain RandomSampler: same generator state, skip consumed batches,
    and discard what the skip drew so it is not logged as trained on."""
    generator = torch.Generator().manual_seed(9)
    start_state = generator.get_state()
    sampler = RecordingSampler(RandomSampler(range(SIZE), generator=generator))
    first = [batch_ids(b) for b in DataLoader(values_dataset(), batch_size=8, sampler=sampler)]
    sampler.discard()

    generator = torch.Generator()
    generator.set_state(start_state)
    sampler = RecordingSampler(RandomSampler(range(SIZE), generator=generator))
    batches = iter(DataLoader(values_dataset(), batch_size=8, sampler=sampler))
    for _ in range(3):
        next(batches)
    sampler.discard()
    with RunLogger(tmp_path) as log:
        for step in range(4, 9):
            assert batch_ids(next(batches)) == first[step - 1]
            sampler.record_step(log, step)
    assert logged(tmp_path) == {step: first[step - 1] for step in range(4, 9)}


def test_sample_id_dataset_with_key_and_pickling() -> None:
    rows = [{"x": i * 10} for i in range(5)]
    dataset = SampleIdDataset(rows, key="sample_id")
    assert dataset[3] == {"x": 30, "sample_id": 3}
    assert dataset.__getitems__([4, 0]) == [{"x": 40, "sample_id": 4}, {"x": 0, "sample_id": 0}]
    copy = pickle.loads(pickle.dumps(dataset))
    assert len(copy) == 5 and copy[1]["sample_id"] == 1
    with pytest.raises(TypeError, match="mapping items"):
        SampleIdDataset([1, 2], key="sample_id")[0]
    assert SampleIdDataset(["a", "b"])[1] == (1, "b")


def _rank(rank: int, store: str, run: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    log = RunLogger(run) if rank == 0 else None
    recorder = StepRecorder(log)
    recorder.add(torch.tensor([rank * 100, rank * 100 + 1]))
    ids = recorder.record(7)
    assert ids == [0, 1, 100, 101]
    if log is not None:
        log.close()
    dist.destroy_process_group()


def test_step_recorder_gathers_every_rank(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    procs: list[Any] = [
        context.Process(target=_rank, args=(r, str(tmp_path / "store"), str(tmp_path / "run")))
        for r in (0, 1)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=60)
    assert [proc.exitcode for proc in procs] == [0, 0]
    assert logged(tmp_path / "run") == {7: [0, 1, 100, 101]}

from __future__ import annotations

import argparse
import io
import os
import pickle
from pathlib import Path

import lightning as L
import pytest
import torch
from torch import nn

from app.ingest.data_state import DataPosition, pickled_scalars, position_from_state


class _Regression(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch: list[torch.Tensor], _: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.layer(x).squeeze(-1), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.fixture(scope="module")
def lightning_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """A real fit: 40 samples in batches of 4 (10 batches an epoch), saved every 3 steps and at
    each epoch end."""
    folder = tmp_path_factory.mktemp("lightning")
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(40, 4), torch.randn(40))
    loader = torch.utils.data.DataLoader(data, batch_size=4, shuffle=True)
    every_3 = L.pytorch.callbacks.ModelCheckpoint(
        dirpath=folder / "steps", every_n_train_steps=3, save_top_k=-1, filename="{step}"
    )
    epoch_end = L.pytorch.callbacks.ModelCheckpoint(
        dirpath=folder / "epochs",
        every_n_epochs=1,
        save_top_k=-1,
        save_on_train_epoch_end=True,
        filename="{epoch}",
    )
    trainer = L.Trainer(
        max_steps=14,
        callbacks=[every_3, epoch_end],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    trainer.fit(_Regression(), loader)
    return {
        path.relative_to(folder).as_posix(): torch.load(path, weights_only=False)
        for path in folder.rglob("*.ckpt")
    }


def test_lightning_mid_epoch_checkpoint(lightning_checkpoints: dict[str, dict]) -> None:
    state = lightning_checkpoints["steps/step=12.ckpt"]
    position = position_from_state(state, batch_size=4)
    # step 12 = all 10 batches of epoch 0 and 2 of epoch 1
    assert position == DataPosition(
        epoch=1, consumed_in_epoch=8, seed=None, consumed_samples=48, source="lightning"
    )
    early = position_from_state(lightning_checkpoints["steps/step=3.ckpt"], batch_size=4)
    assert early is not None and (early.epoch, early.consumed_in_epoch) == (0, 12)
    assert early.consumed_samples == 12


def test_lightning_epoch_end_checkpoint_is_the_next_epochs_start(
    lightning_checkpoints: dict[str, dict],
) -> None:
    state = lightning_checkpoints["epochs/epoch=0.ckpt"]
    position = position_from_state(state["loops"], batch_size=2, world_size=2)
    assert position is not None
    assert (position.epoch, position.consumed_in_epoch, position.consumed_samples) == (1, 0, 40)


def test_lightning_without_a_batch_size_keeps_the_epoch_only(
    lightning_checkpoints: dict[str, dict],
) -> None:
    fit_loop = lightning_checkpoints["steps/step=12.ckpt"]["loops"]["fit_loop"]
    assert position_from_state(fit_loop) == DataPosition(1, None, None, None, "lightning")


def _generator_state(seed: int) -> torch.Tensor:
    return torch.Generator().manual_seed(seed).get_state()


def test_stateful_dataloader_single_process_counts_samples_and_reads_the_seed() -> None:
    # StatefulDataLoader(dataset, batch_size=4, shuffle=True).state_dict() after 3 batches
    state = {
        "_index_sampler_state": None,
        "_sampler_iter_state": {
            "samples_yielded": 12,
            "sampler_iter_state": {"yielded": 12, "generator": _generator_state(1234)},
        },
        "_sampler_iter_yielded": 3,
        "_num_yielded": 3,
        "_IterableDataset_len_called": None,
        "_shared_seed": None,
        "fetcher_state": None,
        "dataset_state": None,
        "_iterator_finished": False,
    }
    position = position_from_state(state)
    assert position == DataPosition(
        epoch=None, consumed_in_epoch=12, seed=1234, consumed_samples=None, source="torchdata"
    )
    assert position_from_state(state, world_size=4).consumed_in_epoch == 48  # type: ignore[union-attr]


def test_stateful_dataloader_with_workers_uses_the_snapshot_and_steps_since() -> None:
    # num_workers=2, snapshot_every_n_steps=4: the snapshot after 4 batches, then 2 more yielded
    state = {
        "_snapshot": {
            "_snapshot_step": 4,
            "_last_yielded_worker_id": 1,
            "_main_snapshot": {
                "_num_workers": 2,
                "_sampler_iter_state": {
                    "samples_yielded": 32,
                    "sampler_iter_state": {"yielded": 32, "generator": _generator_state(7)},
                },
                "_index_sampler_state": None,
                "_sampler_iter_yielded": 4,
                "_IterableDataset_len_called": None,
                "_shared_seed": None,
                "_base_seed": 99,
            },
            "_worker_snapshots": {"worker_0": {}, "worker_1": {}},
        },
        "_steps_since_snapshot": 2,
        "_iterator_finished": False,
    }
    position = position_from_state(state)
    assert position is not None
    assert (position.consumed_in_epoch, position.seed) == (48, 7)


def test_stateful_dataloader_with_a_plain_sampler_needs_a_batch_size() -> None:
    state = {"_sampler_iter_state": None, "_sampler_iter_yielded": 5, "_num_yielded": 5}
    unknown = position_from_state(state)
    assert unknown is not None and unknown.consumed_in_epoch is None
    known = position_from_state(state, batch_size=8)
    assert known is not None and known.consumed_in_epoch == 40


def test_stateful_distributed_sampler_gives_the_epoch() -> None:
    state = {
        "_sampler_iter_state": {
            "samples_yielded": 6,
            "sampler_state": {"yielded": 6, "epoch": 3, "NEXT_YIELDED": None},
        },
        "_sampler_iter_yielded": 3,
        "_num_yielded": 3,
    }
    position = position_from_state(state, world_size=2)
    assert position is not None
    assert (position.epoch, position.consumed_in_epoch) == (3, 12)


def test_streaming_olmo_core_and_sampler_json() -> None:
    streaming = {
        "epoch": 2,
        "sample_in_epoch": 4096,
        "num_canonical_nodes": 8,
        "shuffle_seed": 9176,
        "initial_physical_nodes": 1,
    }
    assert position_from_state(streaming) == DataPosition(2, 4096, 9176, None, "streaming")
    olmo = {
        "dataset_fingerprint_version": "v2",
        "dataset_fingerprint": "abc",
        "batches_processed": 10,
        "tokens_processed": 10 * 8 * 2048,
        "seed": 34521,
        "epoch": 1,  # OLMo-core counts epochs from 1
    }
    assert position_from_state(olmo, batch_size=2, world_size=4) == DataPosition(
        0, 80, 34521, 80, "olmo_core"
    )
    sampler = {"seed": 3, "shuffle": True, "epoch": 1, "consumed_in_epoch": 64}
    assert position_from_state(sampler) == DataPosition(1, 64, 3, None, "sampler")


def test_trainer_skips_and_megatron_train_state() -> None:
    skip = {"skip_batches": 6, "epoch": 2, "seed": 42}
    assert position_from_state(skip, batch_size=4) == DataPosition(2, 24, 42, None, "skip_batches")
    # global step 23 of 10 optimizer steps an epoch, 2 batches of 4 per step
    steps = {"global_step": 23, "steps_per_epoch": 10, "gradient_accumulation_steps": 2}
    assert position_from_state(steps, batch_size=4) == DataPosition(2, 24, None, 184, "global_step")
    megatron = {"step": torch.tensor(75), "consumed_train_samples": torch.tensor(800)}
    position = position_from_state(megatron)
    assert position is not None and position.consumed_samples == 800


def test_unknown_states_give_none() -> None:
    assert position_from_state({"optimizer": {}, "lr": 0.1}) is None
    assert position_from_state([1, 2]) is None  # type: ignore[arg-type]


class _Explodes:
    """Unpickling this would create a file; reading scalars must not."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.mkdir, (str(self.marker),))


def test_pickled_scalars_read_torch_saves_without_unpickling(tmp_path: Path) -> None:
    marker = tmp_path / "was-unpickled"
    buffer = io.BytesIO()
    args = argparse.Namespace(seed=1234, global_batch_size=8, consumed_train_samples=80)
    torch.save({"args": args, "hook": _Explodes(marker), "model": {"w": torch.zeros(3)}}, buffer)
    buffer.seek(0)
    found = pickled_scalars(buffer, ["seed", "consumed_train_samples", "missing"])
    assert found == {"seed": 1234, "consumed_train_samples": 80}
    assert not marker.exists()
    plain = io.BytesIO(pickle.dumps({"gradient_accumulation_steps": 4, "ignore_data_skip": True}))
    assert pickled_scalars(plain, ["gradient_accumulation_steps", "ignore_data_skip"]) == {
        "gradient_accumulation_steps": 4,
        "ignore_data_skip": True,
    }
    assert pickled_scalars(io.BytesIO(b"not a pickle at all"), ["seed"]) == {}

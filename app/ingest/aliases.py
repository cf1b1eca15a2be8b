"""Metric-key aliases: the many names loggers use for the same quantity map to one canonical key."""

from __future__ import annotations

from collections.abc import Mapping

DEFAULT_ALIASES: dict[str, tuple[str, ...]] = {
    "loss": (
        "train/loss",
        "lm loss",
        "lm_loss",
        "train_loss",
        "training_loss",
        "loss/train",
        "train/lm_loss",
        "trainer/loss",
    ),
    "lr": (
        "learning_rate",
        "learning rate",
        "train/lr",
        "train/learning_rate",
        "lr-AdamW",
        "lr-Adam",
        "lr/group0",
        "optim/lr",
    ),
    "grad_norm": (
        "grad norm",
        "gradient_norm",
        "train/grad_norm",
        "grad_norm/total",
        "optim/grad_norm",
        "global_grad_norm",
    ),
    "loss_scale": ("loss scale", "scaler/scale", "train/loss_scale", "grad_scale"),
    "consumed_samples": (
        "consumed samples",
        "consumed_train_samples",
        "train/consumed_samples",
        "samples_seen",
    ),
    "epoch": ("train/epoch", "trainer/epoch"),
    "tokens": ("num_input_tokens_seen", "consumed tokens", "tokens_seen", "train/tokens"),
    "throughput": ("samples_per_second", "train/samples_per_second", "samples per second"),
}

STEP_KEYS = (
    "step",
    "global_step",
    "iteration",
    "_step",
    "trainer/global_step",
    "train/global_step",
)
TIME_KEYS = ("time", "timestamp", "_timestamp", "wall_time", "walltime")


class AliasTable:
    """Maps a logged key to its canonical name; unknown keys keep their own name."""

    def __init__(self, extra: Mapping[str, str] | None = None) -> None:
        table: dict[str, str] = {}
        for canonical, names in DEFAULT_ALIASES.items():
            table[canonical] = canonical
            for name in names:
                table[name] = canonical
        for name, canonical in (extra or {}).items():
            table[name] = canonical
        self._table = table
        self._folded = {k.lower(): v for k, v in table.items()}

    def canonical(self, key: str) -> str:
        found = self._table.get(key)
        if found is not None:
            return found
        return self._folded.get(key.lower(), key)

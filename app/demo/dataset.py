"""Synthetic classification data: overlapping Gaussian clusters, stored sorted by class.

Because rows are sorted by class, an index range is a class: ``ids // per_class`` is the label.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NUM_CLASSES = 10
NUM_FEATURES = 32
TRAIN_PER_CLASS = 190
EVAL_PER_CLASS = 30
CLUSTER_SPREAD = 0.7  # std of the class means; smaller means more overlap


@dataclass(frozen=True)
class Dataset:
    """Read-only train/held-out arrays; stands in for the files a real job reads from disk."""

    x: np.ndarray  # (size, features) float64, sorted by class
    y: np.ndarray  # (size,) int64, non-decreasing
    eval_x: np.ndarray
    eval_y: np.ndarray
    num_classes: int

    @property
    def size(self) -> int:
        return int(self.y.size)

    @property
    def num_features(self) -> int:
        return int(self.x.shape[1])


def make_dataset(
    seed: int,
    *,
    per_class: int = TRAIN_PER_CLASS,
    eval_per_class: int = EVAL_PER_CLASS,
    num_classes: int = NUM_CLASSES,
    num_features: int = NUM_FEATURES,
) -> Dataset:
    """Deterministic for a given seed; train and held-out sets share the class means."""
    rng = np.random.default_rng([seed, 0xDA7A])
    means = rng.normal(0.0, CLUSTER_SPREAD, size=(num_classes, num_features))
    # Each class is stretched along a few directions of its own, so the boundaries are not linear.
    stretch = 1.0 + 0.6 * rng.random(size=(num_classes, num_features))

    def draw(count: int) -> tuple[np.ndarray, np.ndarray]:
        labels = np.repeat(np.arange(num_classes, dtype=np.int64), count)
        noise = rng.standard_normal(size=(labels.size, num_features))
        points = means[labels] + noise * stretch[labels]
        return _frozen(points), _frozen(labels)

    x, y = draw(per_class)
    eval_x, eval_y = draw(eval_per_class)
    return Dataset(x=x, y=y, eval_x=eval_x, eval_y=eval_y, num_classes=num_classes)


def _frozen(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array

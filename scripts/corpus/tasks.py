"""Three tiny real learning tasks: data tensors, a model, its loss, augmentation and corruption.

- ``clusters``: MLP classification of overlapping Gaussian clusters, rows sorted by class.
- ``regression``: a small MLP fitting a smooth nonlinear function of 8 inputs.
- ``chars``: next-character prediction from an 8-character window with an embedding.

The data tensors stand in for files on disk: they outlive a crashed process; nothing else does.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor, nn
from torch.nn import functional

TASKS = ("clusters", "regression", "chars")
EVAL_SIZE = 256
CONTEXT = 8


class Task:
    """Base: train/held-out tensors and what the trainer does with them."""

    name: ClassVar[str] = ""

    def __init__(self, x: Tensor, y: Tensor, eval_x: Tensor, eval_y: Tensor) -> None:
        self.x, self.y, self.eval_x, self.eval_y = x, y, eval_x, eval_y

    @property
    def size(self) -> int:
        return int(self.y.shape[0])

    def build_model(self, hidden: int) -> nn.Module:
        raise NotImplementedError

    def loss(self, output: Tensor, y: Tensor) -> Tensor:
        return functional.cross_entropy(output, y)

    def augment(self, x: Tensor, generator: torch.Generator, strength: float) -> Tensor:
        """Training-time noise drawn from the checkpointed RNG."""
        return x + strength * torch.randn(x.shape, generator=generator)

    def corrupt(
        self, x: Tensor, y: Tensor, generator: torch.Generator, mode: str
    ) -> tuple[Tensor, Tensor]:
        """A garbled read: wrong labels, or inputs from a broken decode."""
        raise NotImplementedError

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        output = model(self.eval_x)
        metrics = {"eval_loss": float(self.loss(output, self.eval_y))}
        if self.eval_y.dtype == torch.long:
            accuracy = (output.argmax(dim=1) == self.eval_y).float().mean()
            metrics["accuracy"] = float(accuracy)
        return metrics


class Clusters(Task):
    name = "clusters"

    def __init__(self, size: int, seed: int, label_noise: float, classes: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.classes = classes
        features = 16
        means = 1.1 * torch.randn(classes, features, generator=generator)
        stretch = 1.0 + 0.6 * torch.rand(classes, features, generator=generator)

        def draw(count: int) -> tuple[Tensor, Tensor]:
            labels = torch.arange(count) * classes // count  # sorted by class
            noise = torch.randn(count, features, generator=generator)
            return means[labels] + noise * stretch[labels], labels

        x, y = draw(size)
        flip = torch.rand(size, generator=generator) < label_noise
        y = torch.where(flip, torch.randint(0, classes, (size,), generator=generator), y)
        super().__init__(x, y, *draw(EVAL_SIZE))

    def build_model(self, hidden: int) -> nn.Module:
        return nn.Sequential(
            nn.Linear(self.x.shape[1], hidden), nn.ReLU(), nn.Linear(hidden, self.classes)
        )

    def corrupt(
        self, x: Tensor, y: Tensor, generator: torch.Generator, mode: str
    ) -> tuple[Tensor, Tensor]:
        if mode == "inputs":
            return 12.0 * torch.randn(x.shape, generator=generator), y
        return x, (y + 1 + torch.arange(y.shape[0]) % (self.classes - 1)) % self.classes


class Regression(Task):
    name = "regression"

    def __init__(self, size: int, seed: int, label_noise: float) -> None:
        generator = torch.Generator().manual_seed(seed)
        features = 8
        w = torch.randn(features, generator=generator) / features**0.5
        v = torch.randn(features, generator=generator)

        def draw(count: int, noise: float) -> tuple[Tensor, Tensor]:
            x = torch.randn(count, features, generator=generator)
            y = x @ w + 0.8 * torch.sin(x @ v) + noise * torch.randn(count, generator=generator)
            return x, y.unsqueeze(1)

        x, y = draw(size, 0.05 + label_noise)
        order = torch.argsort(y[:, 0])  # stored sorted by target, like a bucketed file
        super().__init__(x[order], y[order], *draw(EVAL_SIZE, 0.05))

    def build_model(self, hidden: int) -> nn.Module:
        return nn.Sequential(
            nn.Linear(self.x.shape[1], hidden),
            nn.Tanh(),
            nn.Linear(hidden, hidden),
            nn.Tanh(),
            nn.Linear(hidden, 1),
        )

    def loss(self, output: Tensor, y: Tensor) -> Tensor:
        return functional.mse_loss(output, y)

    def corrupt(
        self, x: Tensor, y: Tensor, generator: torch.Generator, mode: str
    ) -> tuple[Tensor, Tensor]:
        if mode == "inputs":
            return 10.0 * torch.randn(x.shape, generator=generator), y
        return x, 6.0 - 5.0 * y


class Chars(Task):
    name = "chars"

    def __init__(self, size: int, seed: int, label_noise: float, vocab: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.vocab = vocab
        # A peaked Markov chain: each character has a few likely successors.
        logits = 5.0 * torch.randn(vocab, vocab, generator=generator)
        transitions = torch.softmax(logits, dim=1)

        def draw(count: int, noise: float) -> tuple[Tensor, Tensor]:
            text = torch.empty(count + CONTEXT, dtype=torch.long)
            text[0] = 0
            draws = torch.rand(count + CONTEXT, generator=generator)
            cumulative = transitions.cumsum(dim=1)
            for i in range(1, text.shape[0]):
                row = cumulative[text[i - 1]]
                text[i] = min(int(torch.searchsorted(row, draws[i])), vocab - 1)
            windows = text.unfold(0, CONTEXT + 1, 1)[:count]
            x, y = windows[:, :CONTEXT].clone(), windows[:, CONTEXT].clone()
            flip = torch.rand(count, generator=generator) < noise
            y = torch.where(flip, torch.randint(0, vocab, (count,), generator=generator), y)
            return x, y

        super().__init__(*draw(size, label_noise), *draw(EVAL_SIZE, 0.0))

    def build_model(self, hidden: int) -> nn.Module:
        width = 12
        return nn.Sequential(
            nn.Embedding(self.vocab, width),
            nn.Flatten(),
            nn.Linear(CONTEXT * width, hidden),
            nn.ReLU(),
            nn.Linear(hidden, self.vocab),
        )

    def augment(self, x: Tensor, generator: torch.Generator, strength: float) -> Tensor:
        """Token dropout: a few characters replaced with random ones."""
        swap = torch.rand(x.shape, generator=generator) < strength / 2
        noise = torch.randint(0, self.vocab, x.shape, generator=generator)
        return torch.where(swap, noise, x)

    def corrupt(
        self, x: Tensor, y: Tensor, generator: torch.Generator, mode: str
    ) -> tuple[Tensor, Tensor]:
        if mode == "inputs":
            return torch.randint(0, self.vocab, x.shape, generator=generator), y
        return x, (y + 1 + torch.arange(y.shape[0]) % (self.vocab - 1)) % self.vocab


def make_task(name: str, size: int, seed: int, label_noise: float) -> Task:
    if name == "clusters":
        return Clusters(size, seed, label_noise, classes=4 + seed % 5)
    if name == "regression":
        return Regression(size, seed, label_noise)
    if name == "chars":
        return Chars(size, seed, label_noise, vocab=16 + seed % 12)
    raise ValueError(f"unknown task {name!r}; choose from: {', '.join(TASKS)}")

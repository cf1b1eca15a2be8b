"""AdamW, a warm-up + cosine learning-rate schedule and global-norm gradient clipping."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


class AdamW:
    """Decoupled weight decay Adam over one flat parameter vector."""

    def __init__(
        self,
        size: int,
        *,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
    ) -> None:
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.weight_decay = weight_decay
        self.m = np.zeros(size)
        self.v = np.zeros(size)
        self.t = 0

    def step(self, params: np.ndarray, grad: np.ndarray, lr: float) -> None:
        self.t += 1
        self.m *= self.beta1
        self.m += (1.0 - self.beta1) * grad
        self.v *= self.beta2
        self.v += (1.0 - self.beta2) * grad * grad
        m_hat = self.m / (1.0 - self.beta1**self.t)
        v_hat = self.v / (1.0 - self.beta2**self.t)
        params *= 1.0 - lr * self.weight_decay
        params -= lr * m_hat / (np.sqrt(v_hat) + self.eps)

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"m": self.m.copy(), "v": self.v.copy(), "t": np.asarray(self.t, dtype=np.int64)}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.m[...] = state["m"]
        self.v[...] = state["v"]
        self.t = int(state["t"])


class WarmupCosine:
    """Linear warm-up to ``peak_lr``, then cosine decay to ``min_ratio * peak_lr``."""

    def __init__(self, peak_lr: float, warmup: int, total: int, min_ratio: float = 0.1) -> None:
        self.peak_lr = peak_lr
        self.warmup = warmup
        self.total = total
        self.min_ratio = min_ratio
        self.last_step = 0  # calls to step() so far

    def lr(self) -> float:
        n = self.last_step
        if n < self.warmup:
            return self.peak_lr * (n + 1) / self.warmup
        progress = min((n - self.warmup) / max(self.total - self.warmup, 1), 1.0)
        cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.peak_lr * (self.min_ratio + (1.0 - self.min_ratio) * cosine)

    def step(self) -> None:
        self.last_step += 1

    def state_dict(self) -> dict[str, Any]:
        return {
            "last_step": self.last_step,
            "peak_lr": self.peak_lr,
            "warmup": self.warmup,
            "total": self.total,
            "min_ratio": self.min_ratio,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.last_step = int(state["last_step"])
        self.peak_lr = float(state["peak_lr"])
        self.warmup = int(state["warmup"])
        self.total = int(state["total"])
        self.min_ratio = float(state["min_ratio"])


def clip_grad_norm(grad: np.ndarray, max_norm: float) -> float:
    """Scale ``grad`` in place to at most ``max_norm``; return the norm before clipping."""
    norm = float(np.sqrt(grad @ grad))
    if norm > max_norm:
        grad *= max_norm / (norm + 1e-6)
    return norm

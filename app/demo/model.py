"""A one-hidden-layer ReLU MLP with softmax cross-entropy and hand-written backprop.

Parameters and gradients each live in one flat float64 vector (the layers are views into it), so
the optimizer, clipping and checkpointing work on a single array.
"""

from __future__ import annotations

import numpy as np

PREDICT_CHUNK = 64


class MLP:
    def __init__(self, num_features: int, hidden: int, num_classes: int, *, seed: int) -> None:
        self.shapes = {
            "w1": (num_features, hidden),
            "b1": (hidden,),
            "w2": (hidden, num_classes),
            "b2": (num_classes,),
        }
        sizes = [int(np.prod(shape)) for shape in self.shapes.values()]
        self.params = np.zeros(sum(sizes))
        self.grad = np.zeros(sum(sizes))
        self._p = self._views(self.params)
        self._g = self._views(self.grad)
        rng = np.random.default_rng([seed, 0x1A1])
        self._p["w1"][...] = rng.normal(0.0, np.sqrt(2.0 / num_features), self.shapes["w1"])
        self._p["w2"][...] = rng.normal(0.0, np.sqrt(1.0 / hidden), self.shapes["w2"])

    @property
    def size(self) -> int:
        return int(self.params.size)

    def _views(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        views: dict[str, np.ndarray] = {}
        start = 0
        for name, shape in self.shapes.items():
            stop = start + int(np.prod(shape))
            views[name] = flat[start:stop].reshape(shape)
            start = stop
        return views

    def logits(self, x: np.ndarray) -> np.ndarray:
        p = self._p
        hidden = np.maximum(x @ p["w1"] + p["b1"], 0.0)
        out: np.ndarray = hidden @ p["w2"] + p["b2"]
        return out

    def predict(self, x: np.ndarray) -> np.ndarray:
        # Small slices keep each matrix product under OpenBLAS's threading threshold: on a busy
        # machine its worker threads cost far more than they save at this size.
        chunks = [self.logits(x[i : i + PREDICT_CHUNK]) for i in range(0, len(x), PREDICT_CHUNK)]
        return np.argmax(np.concatenate(chunks), axis=1)

    def accumulate(self, x: np.ndarray, y: np.ndarray) -> float:
        """Add d(mean loss)/d(params) of this batch to ``grad`` and return the mean loss.

        One batch of 32 here is the same as 4 micro-batches of 8 each scaled by 1/4: gradients and
        the loss add up over calls until the caller zeroes them.
        """
        p, g = self._p, self._g
        pre = x @ p["w1"] + p["b1"]
        hidden = np.maximum(pre, 0.0)
        logits = hidden @ p["w2"] + p["b2"]
        logits -= logits.max(axis=1, keepdims=True)
        exp = np.exp(logits)
        total = exp.sum(axis=1, keepdims=True)
        rows = np.arange(y.size)
        loss = float(np.mean(np.log(total[:, 0]) - logits[rows, y]))
        dlogits = exp / total
        dlogits[rows, y] -= 1.0
        dlogits /= y.size
        g["w2"] += hidden.T @ dlogits
        g["b2"] += dlogits.sum(axis=0)
        dpre = dlogits @ p["w2"].T
        dpre[pre <= 0.0] = 0.0
        g["w1"] += x.T @ dpre
        g["b1"] += dpre.sum(axis=0)
        return loss

    def zero_grad(self) -> None:
        self.grad.fill(0.0)

    def state_dict(self) -> dict[str, np.ndarray]:
        return {name: view.copy() for name, view in self._p.items()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        for name, view in self._p.items():
            view[...] = state[name]

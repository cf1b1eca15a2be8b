"""The findings vocabulary. Kinds and severities are a public contract: keep them stable."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

INFO, WARNING, CRITICAL = "info", "warning", "critical"
SEVERITY_RANK = {INFO: 0, WARNING: 1, CRITICAL: 2}

RESUME_DATA_DRIFT = "resume_data_drift"
RESUME_ORDER_DIVERGENCE = "resume_order_divergence"
INCOMPLETE_CHECKPOINT = "incomplete_checkpoint"
STATE_NOT_RESTORED = "state_not_restored"
LR_DISCONTINUITY = "lr_discontinuity"
RESUME_LOSS_SPIKE = "resume_loss_spike"
CHECKPOINT_LOSS_SPIKE = "checkpoint_loss_spike"
STEP_GAP = "step_gap"
LOSS_SPIKE = "loss_spike"
RESUME_OK = "resume_ok"
CHECKPOINT_STALL = "checkpoint_stall"
GPU_FAULT = "gpu_fault"

KINDS = (
    RESUME_DATA_DRIFT,
    RESUME_ORDER_DIVERGENCE,
    INCOMPLETE_CHECKPOINT,
    STATE_NOT_RESTORED,
    LR_DISCONTINUITY,
    RESUME_LOSS_SPIKE,
    CHECKPOINT_LOSS_SPIKE,
    STEP_GAP,
    LOSS_SPIKE,
    RESUME_OK,
    CHECKPOINT_STALL,
    GPU_FAULT,
)

PASS, WARN, FAIL = "pass", "warn", "fail"


@dataclass
class Finding:
    kind: str
    severity: str
    message: str
    step: int | None = None
    step_end: int | None = None
    resume_from_step: int | None = None
    segment: int | None = None
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "step": self.step,
            "step_end": self.step_end,
            "resume_from_step": self.resume_from_step,
            "segment": self.segment,
            "message": self.message,
            "evidence": self.evidence,
        }


def verdict_of(findings: list[Finding]) -> str:
    """``fail`` if any critical finding, ``warn`` if any warning, else ``pass``."""
    worst = max((SEVERITY_RANK[f.severity] for f in findings), default=0)
    return {2: FAIL, 1: WARN}.get(worst, PASS)


def fmt_int(value: int) -> str:
    return f"{value:,}"


def index_ranges(ids: Any, limit: int = 20) -> list[list[int]]:
    """Sorted ids compressed to inclusive ``[first, last]`` ranges (at most ``limit``, largest)."""
    import numpy as np

    arr = np.asarray(ids, dtype=np.int64)
    if arr.size > 1 and not bool(np.all(arr[1:] > arr[:-1])):
        arr = np.unique(arr)
    if arr.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(arr) != 1)
    starts = np.concatenate(([arr[0]], arr[breaks + 1]))
    ends = np.concatenate((arr[breaks], [arr[-1]]))
    if starts.size > limit:
        keep = np.sort(np.argsort(ends - starts, kind="stable")[::-1][:limit])
        starts, ends = starts[keep], ends[keep]
    return [[int(a), int(b)] for a, b in zip(starts, ends, strict=True)]

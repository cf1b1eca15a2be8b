"""Response bodies of the API. Field names are part of the public contract: keep them stable."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict


class Progress(BaseModel):
    done: int
    total: int


class JobOut(BaseModel):
    id: int
    state: str
    project: str
    run_name: str
    run_id: int | None
    source_name: str
    source_kind: str
    source_sha256: str
    source_bytes: int
    phase: str | None
    progress: Progress
    counts: dict[str, int]
    warnings: list[str]
    error: str | None
    attempts: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class JobAccepted(BaseModel):
    job_id: int
    state: str
    status_url: str


class RunSummary(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    project: str
    name: str
    external_id: str | None
    source_format: str
    status: str
    dataset_size: int | None
    global_batch_size: int | None
    first_step: int | None
    last_step: int | None
    num_steps: int
    num_segments: int
    num_resumes: int
    verdict: str | None
    tags: list[str]
    started_at: datetime | None
    ended_at: datetime | None
    created_at: datetime
    updated_at: datetime


class RunsPage(BaseModel):
    items: list[RunSummary]
    total: int
    limit: int
    offset: int


class SegmentOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    ordinal: int
    start_step: int | None
    end_step: int | None
    resumed_from: str | None
    resumed_from_checkpoint_id: int | None
    restored: list[str] | None
    started_at: datetime | None
    ended_at: datetime | None
    exit_reason: str | None
    num_metric_rows: int
    num_sample_steps: int


class ComponentOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    name: str
    file: str | None
    bytes: int | None


class CheckpointOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    step: int
    save_started_at: datetime | None
    save_ended_at: datetime | None
    save_seconds: float | None
    consumed_samples: int | None
    epoch: int | None
    consumed_in_epoch: int | None
    seed: int | None
    shuffle: bool | None
    dataset_size: int | None
    global_batch_size: int | None
    components: list[ComponentOut]
    data_state: dict[str, Any] | None
    verdict: str | None
    verdict_reasons: list[str]


class SeriesOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    key: str
    source_key: str
    kind: str
    num_points: int
    num_superseded: int
    first_step: int | None
    last_step: int | None
    min_value: float | None
    max_value: float | None


class RunDetail(RunSummary):
    config: dict[str, Any]
    segments: list[SegmentOut]
    checkpoints: list[CheckpointOut]
    metrics: list[SeriesOut]


class FindingOut(BaseModel):
    kind: str
    severity: str
    step: int | None
    step_end: int | None
    resume_from_step: int | None
    segment: int | None
    message: str
    evidence: dict[str, Any]


class FindingsOut(BaseModel):
    run_id: int
    verdict: str | None
    findings: list[FindingOut]


class SuspectFinding(BaseModel):
    kind: str
    severity: str
    message: str


class SuspectResume(BaseModel):
    resume_from_step: int | None
    findings: list[SuspectFinding]
    repair: dict[str, Any] | None


class CheckpointVerdictOut(BaseModel):
    name: str
    step: int
    verdict: str | None
    reasons: list[str]


class VerdictOut(BaseModel):
    run_id: int
    verdict: str | None
    analyzed_at: datetime | None
    counts: dict[str, int]
    suspect_resumes: list[SuspectResume]
    checkpoints: list[CheckpointVerdictOut]


class PointsOut(BaseModel):
    steps: list[int]
    values: list[float | None]
    segments: list[int]


class MetricOut(BaseModel):
    run_id: int
    key: str
    num_points: int
    downsampled: bool
    steps: list[int]
    values: list[float | None]
    times: list[float | None]
    segments: list[int]
    superseded: PointsOut | None = None


class CheckpointsOut(BaseModel):
    run_id: int
    run_verdict: str | None
    items: list[CheckpointOut]


class CheckpointCheckOut(BaseModel):
    """Is it safe to resume from, or promote, this checkpoint? ``safe`` is null until analysed."""

    run_id: int
    run_verdict: str | None
    safe: bool | None
    reasons: list[str]
    checkpoint: CheckpointOut


class EpochCoverageOut(BaseModel):
    epoch: int
    first_step: int
    last_step: int
    unseen: int
    repeated: int
    complete: bool


class CoverageOut(BaseModel):
    """Per designed epoch, how many dataset samples were never seen and how many were seen
    more than once. ``grid`` (the dashboard heatmap) only with ``?grid=true``."""

    run_id: int
    analyzed_at: datetime | None
    dataset_size: int | None
    sampler: str | None
    epoch_plan: dict[str, Any] | None
    epochs: list[EpochCoverageOut]
    unseen: int
    repeated: int
    grid: dict[str, Any] | None = None


class RunFindingOut(FindingOut):
    run_id: int
    project: str
    run_name: str


class FindingsPage(BaseModel):
    items: list[RunFindingOut]
    total: int
    limit: int
    offset: int


class TagsIn(BaseModel):
    add: list[str] = []
    remove: list[str] = []


class TagsOut(BaseModel):
    run_id: int
    tags: list[str]


class JobsPage(BaseModel):
    items: list[JobOut]
    total: int
    limit: int
    offset: int

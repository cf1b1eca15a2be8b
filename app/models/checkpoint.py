"""Checkpoints as their manifests describe them, with the state components they hold."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Boolean, ForeignKey, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.models.base import Base, JSONType, UTCDateTime


class Checkpoint(Base):
    __tablename__ = "checkpoint"
    __table_args__ = (
        UniqueConstraint("run_id", "name"),
        Index("ix_checkpoint_run_id_step", "run_id", "step"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(500))
    step: Mapped[int] = mapped_column(Integer)
    save_started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    save_ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    consumed_samples: Mapped[int | None] = mapped_column(BigInteger)
    epoch: Mapped[int | None] = mapped_column(Integer)
    consumed_in_epoch: Mapped[int | None] = mapped_column(BigInteger)
    seed: Mapped[int | None] = mapped_column(BigInteger)
    shuffle: Mapped[bool | None] = mapped_column(Boolean)
    dataset_size: Mapped[int | None] = mapped_column(BigInteger)
    global_batch_size: Mapped[int | None] = mapped_column(Integer)
    data_state: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    manifest: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    verdict: Mapped[str | None] = mapped_column(String(10))  # safe, unsafe
    verdict_reasons: Mapped[list[str] | None] = mapped_column(JSONType)

    components: Mapped[list[CheckpointComponent]] = relationship(
        back_populates="checkpoint",
        order_by="CheckpointComponent.name",
        cascade="all, delete-orphan",
        passive_deletes=True,
        lazy="selectin",
    )


class CheckpointComponent(Base):
    """One piece of resumable state (model, optimizer, scheduler, rng, dataloader, scaler)."""

    __tablename__ = "checkpoint_component"
    __table_args__ = (UniqueConstraint("checkpoint_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    checkpoint_id: Mapped[int] = mapped_column(ForeignKey("checkpoint.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(60))
    file: Mapped[str | None] = mapped_column(String(500))
    bytes: Mapped[int | None] = mapped_column(BigInteger)

    checkpoint: Mapped[Checkpoint] = relationship(back_populates="components")

"""Ingest job recovery: the claim token and worker that hold a job, and its heartbeat.

A worker claims a job with one conditional UPDATE and refreshes ``heartbeat_at`` while it
works; the recovery sweep queues again jobs whose worker stopped beating or whose message was
lost. Jobs running when this migration is applied have no heartbeat: the sweep judges them by
``started_at``.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30 14:05:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("ingest_job", schema=None) as batch_op:
        batch_op.add_column(sa.Column("claim_token", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("worker", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index("ix_ingest_job_started_at", ["started_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("ingest_job", schema=None) as batch_op:
        batch_op.drop_index("ix_ingest_job_started_at")
        batch_op.drop_column("heartbeat_at")
        batch_op.drop_column("worker")
        batch_op.drop_column("claim_token")

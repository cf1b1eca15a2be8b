"""Live runs fed by streaming loggers: batches received (for exactly-once appends) and the
refresh bookkeeping that debounces re-analysis.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 10:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "stream_batch",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("logger", sa.String(length=64), nullable=False),
        sa.Column("batch", sa.Integer(), nullable=False),
        sa.Column("records", sa.Integer(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["run.id"], name=op.f("fk_stream_batch_run_id_run"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stream_batch")),
        sa.UniqueConstraint(
            "run_id", "logger", "batch", name=op.f("uq_stream_batch_run_id_logger_batch")
        ),
    )
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("live", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch_op.add_column(
            sa.Column("refresh_requested_at", sa.DateTime(timezone=True), nullable=True)
        )
        batch_op.add_column(sa.Column("refreshed_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.drop_column("refreshed_at")
        batch_op.drop_column("refresh_requested_at")
        batch_op.drop_column("live")
    op.drop_table("stream_batch")

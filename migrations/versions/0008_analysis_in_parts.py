"""A large run's analysis in parts: analysis_batch (one per analysis, counting its finished
parts) and analysis_part (a window of epochs and its summaries until the merge), and the run's
data generation, bumped whenever its rows are replaced, so parts of stale data are never merged.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30 15:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("data_generation", sa.Integer(), server_default="0", nullable=False)
        )
    op.create_table(
        "analysis_batch",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("claim_token", sa.String(length=32), nullable=True),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("plan", JSON, nullable=False),
        sa.Column("last_step", sa.Integer(), nullable=False),
        sa.Column("parts", sa.Integer(), nullable=False),
        sa.Column("parts_done", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["ingest_job.id"],
            name=op.f("fk_analysis_batch_job_id_ingest_job"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["run.id"], name=op.f("fk_analysis_batch_run_id_run"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_analysis_batch")),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("analysis_batch", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_analysis_batch_job_id"), ["job_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_analysis_batch_run_id"), ["run_id"], unique=False)
    op.create_table(
        "analysis_part",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("batch_id", sa.Integer(), nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.Column("first_epoch", sa.Integer(), nullable=False),
        sa.Column("last_epoch", sa.Integer(), nullable=False),
        sa.Column("summary", sa.LargeBinary(), nullable=True),
        sa.Column("done_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["batch_id"],
            ["analysis_batch.id"],
            name=op.f("fk_analysis_part_batch_id_analysis_batch"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_analysis_part")),
        sa.UniqueConstraint("batch_id", "ordinal", name=op.f("uq_analysis_part_batch_id_ordinal")),
        sqlite_autoincrement=True,
    )


def downgrade() -> None:
    op.drop_table("analysis_part")
    with op.batch_alter_table("analysis_batch", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_analysis_batch_run_id"))
        batch_op.drop_index(batch_op.f("ix_analysis_batch_job_id"))
    op.drop_table("analysis_batch")
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.drop_column("data_generation")

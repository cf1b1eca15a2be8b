"""Analysis results: run verdict and summary, per-checkpoint verdicts, and findings with the
resume they concern (``details`` becomes ``evidence``).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 09:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("checkpoint", schema=None) as batch_op:
        batch_op.add_column(sa.Column("verdict", sa.String(length=10), nullable=True))
        batch_op.add_column(sa.Column("verdict_reasons", JSON, nullable=True))

    with op.batch_alter_table("finding", schema=None) as batch_op:
        batch_op.add_column(sa.Column("resume_from_step", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("segment", sa.Integer(), nullable=True))
        batch_op.alter_column("details", new_column_name="evidence", existing_type=JSON)

    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.add_column(sa.Column("verdict", sa.String(length=10), nullable=True))
        batch_op.add_column(sa.Column("analysis", JSON, nullable=True))
        batch_op.add_column(sa.Column("analyzed_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index(batch_op.f("ix_run_verdict"), ["verdict"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_run_verdict"))
        batch_op.drop_column("analyzed_at")
        batch_op.drop_column("analysis")
        batch_op.drop_column("verdict")

    with op.batch_alter_table("finding", schema=None) as batch_op:
        batch_op.alter_column("evidence", new_column_name="details", existing_type=JSON)
        batch_op.drop_column("segment")
        batch_op.drop_column("resume_from_step")

    with op.batch_alter_table("checkpoint", schema=None) as batch_op:
        batch_op.drop_column("verdict_reasons")
        batch_op.drop_column("verdict")

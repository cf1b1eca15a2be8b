"""A large sample trace parsed in parts: ingest_batch (one per ingest try, counting its parsed
parts) and ingest_part (a byte range of whole lines of the trace).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-30 18:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "ingest_batch",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("claim_token", sa.String(length=32), nullable=False),
        sa.Column("file", sa.String(length=1000), nullable=False),
        sa.Column("folder", sa.String(length=200), nullable=False),
        sa.Column("parts", sa.Integer(), nullable=False),
        sa.Column("parts_done", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["ingest_job.id"],
            name=op.f("fk_ingest_batch_job_id_ingest_job"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ingest_batch")),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("ingest_batch", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_ingest_batch_job_id"), ["job_id"], unique=False)
    op.create_table(
        "ingest_part",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("batch_id", sa.Integer(), nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.Column("start", sa.BigInteger(), nullable=False),
        sa.Column("end", sa.BigInteger(), nullable=False),
        sa.Column("first_line", sa.BigInteger(), nullable=False),
        sa.Column("warnings", JSON, nullable=True),
        sa.Column("done_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["batch_id"],
            ["ingest_batch.id"],
            name=op.f("fk_ingest_part_batch_id_ingest_batch"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ingest_part")),
        sa.UniqueConstraint("batch_id", "ordinal", name=op.f("uq_ingest_part_batch_id_ordinal")),
        sqlite_autoincrement=True,
    )


def downgrade() -> None:
    op.drop_table("ingest_part")
    with op.batch_alter_table("ingest_batch", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_ingest_batch_job_id"))
    op.drop_table("ingest_batch")

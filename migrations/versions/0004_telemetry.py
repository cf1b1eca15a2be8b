"""GPU telemetry: nodes to pull from, series keyed on host + GPU UUID, raw scrapes as compact
arrays, and per-minute / per-hour rollups.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 11:14:06.261455
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "node",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("url", sa.String(length=1000), nullable=False),
        sa.Column("query", sa.String(length=1000), nullable=True),
        sa.Column("interval_s", sa.Float(), nullable=False),
        sa.Column("timeout_s", sa.Float(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("labels", JSON, nullable=False),
        sa.Column("last_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_success_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("last_error_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_node")),
        sa.UniqueConstraint("name", name=op.f("uq_node_name")),
    )
    op.create_table(
        "telemetry_rollup",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("resolution_s", sa.Integer(), nullable=False),
        sa.Column("start", sa.Float(), nullable=False),
        sa.Column("end", sa.Float(), nullable=False),
        sa.Column("series", sa.LargeBinary(), nullable=False),
        sa.Column("times", sa.LargeBinary(), nullable=False),
        sa.Column("mins", sa.LargeBinary(), nullable=False),
        sa.Column("means", sa.LargeBinary(), nullable=False),
        sa.Column("maxs", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["node_id"],
            ["node.id"],
            name=op.f("fk_telemetry_rollup_node_id_node"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_telemetry_rollup")),
        sa.UniqueConstraint(
            "node_id",
            "resolution_s",
            "start",
            name=op.f("uq_telemetry_rollup_node_id_resolution_s_start"),
        ),
    )
    with op.batch_alter_table("telemetry_rollup", schema=None) as batch_op:
        batch_op.create_index(
            "ix_telemetry_rollup_node_id_resolution_s_end",
            ["node_id", "resolution_s", "end"],
            unique=False,
        )

    op.create_table(
        "telemetry_scrape",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("series", sa.LargeBinary(), nullable=False),
        sa.Column("values", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["node_id"],
            ["node.id"],
            name=op.f("fk_telemetry_scrape_node_id_node"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_telemetry_scrape")),
    )
    with op.batch_alter_table("telemetry_scrape", schema=None) as batch_op:
        batch_op.create_index("ix_telemetry_scrape_node_id_at", ["node_id", "at"], unique=False)

    op.create_table(
        "telemetry_series",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(length=200), nullable=False),
        sa.Column("gpu", sa.String(length=200), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=True),
        sa.Column("model", sa.String(length=200), nullable=True),
        sa.Column("metric", sa.String(length=100), nullable=False),
        sa.Column("labels", JSON, nullable=False),
        sa.ForeignKeyConstraint(
            ["node_id"],
            ["node.id"],
            name=op.f("fk_telemetry_series_node_id_node"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_telemetry_series")),
        sa.UniqueConstraint(
            "node_id",
            "host",
            "gpu",
            "metric",
            name=op.f("uq_telemetry_series_node_id_host_gpu_metric"),
        ),
    )
    with op.batch_alter_table("telemetry_series", schema=None) as batch_op:
        batch_op.create_index("ix_telemetry_series_host", ["host"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("telemetry_series", schema=None) as batch_op:
        batch_op.drop_index("ix_telemetry_series_host")

    op.drop_table("telemetry_series")
    with op.batch_alter_table("telemetry_scrape", schema=None) as batch_op:
        batch_op.drop_index("ix_telemetry_scrape_node_id_at")

    op.drop_table("telemetry_scrape")
    with op.batch_alter_table("telemetry_rollup", schema=None) as batch_op:
        batch_op.drop_index("ix_telemetry_rollup_node_id_resolution_s_end")

    op.drop_table("telemetry_rollup")
    op.drop_table("node")

"""API tokens (stored hashed), alert channels, rules, alerts with their deliveries and per-run
silences, and run tags.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30 12:37:18.300193
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "alert_channel",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("url", sa.Text(), nullable=True),
        sa.Column("recipients", JSON, nullable=True),
        sa.Column("secret", sa.Text(), nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_channel")),
        sa.UniqueConstraint("name", name=op.f("uq_alert_channel_name")),
    )
    op.create_table(
        "alert_rule",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("channel_id", sa.Integer(), nullable=False),
        sa.Column("kinds", JSON, nullable=False),
        sa.Column("min_severity", sa.String(length=20), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["channel_id"],
            ["alert_channel.id"],
            name=op.f("fk_alert_rule_channel_id_alert_channel"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["project.id"],
            name=op.f("fk_alert_rule_project_id_project"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_rule")),
    )
    with op.batch_alter_table("alert_rule", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_alert_rule_channel_id"), ["channel_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_alert_rule_project_id"), ["project_id"], unique=False)

    op.create_table(
        "api_token",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("scope", sa.String(length=10), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=True),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["project.id"],
            name=op.f("fk_api_token_project_id_project"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_token")),
        sa.UniqueConstraint("digest", name=op.f("uq_api_token_digest")),
    )
    with op.batch_alter_table("api_token", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_api_token_project_id"), ["project_id"], unique=False)

    op.create_table(
        "alert",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=120), nullable=False),
        sa.Column("kind", sa.String(length=60), nullable=False),
        sa.Column("severity", sa.String(length=20), nullable=False),
        sa.Column("step", sa.Integer(), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("silenced", sa.Boolean(), nullable=False),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["run.id"], name=op.f("fk_alert_run_id_run"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert")),
        sa.UniqueConstraint("run_id", "key", name=op.f("uq_alert_run_id_key")),
    )
    with op.batch_alter_table("alert", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_alert_run_id"), ["run_id"], unique=False)
        batch_op.create_index("ix_alert_updated_at", ["updated_at"], unique=False)

    op.create_table(
        "alert_silence",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["run.id"], name=op.f("fk_alert_silence_run_id_run"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_alert_silence")),
    )
    op.create_table(
        "run_tag",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("tag", sa.String(length=100), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["run.id"], name=op.f("fk_run_tag_run_id_run"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", "tag", name=op.f("pk_run_tag")),
    )
    with op.batch_alter_table("run_tag", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_run_tag_tag"), ["tag"], unique=False)

    op.create_table(
        "alert_delivery",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("alert_id", sa.Integer(), nullable=False),
        sa.Column("channel_id", sa.Integer(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=10), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("payload", JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["alert_id"],
            ["alert.id"],
            name=op.f("fk_alert_delivery_alert_id_alert"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["channel_id"],
            ["alert_channel.id"],
            name=op.f("fk_alert_delivery_channel_id_alert_channel"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_delivery")),
        sa.UniqueConstraint(
            "alert_id",
            "channel_id",
            "revision",
            name=op.f("uq_alert_delivery_alert_id_channel_id_revision"),
        ),
    )
    with op.batch_alter_table("alert_delivery", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_alert_delivery_alert_id"), ["alert_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_alert_delivery_channel_id"), ["channel_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_alert_delivery_state"), ["state"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("alert_delivery", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_alert_delivery_state"))
        batch_op.drop_index(batch_op.f("ix_alert_delivery_channel_id"))
        batch_op.drop_index(batch_op.f("ix_alert_delivery_alert_id"))

    op.drop_table("alert_delivery")
    with op.batch_alter_table("run_tag", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_run_tag_tag"))

    op.drop_table("run_tag")
    op.drop_table("alert_silence")
    with op.batch_alter_table("alert", schema=None) as batch_op:
        batch_op.drop_index("ix_alert_updated_at")
        batch_op.drop_index(batch_op.f("ix_alert_run_id"))

    op.drop_table("alert")
    with op.batch_alter_table("api_token", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_api_token_project_id"))

    op.drop_table("api_token")
    with op.batch_alter_table("alert_rule", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_alert_rule_project_id"))
        batch_op.drop_index(batch_op.f("ix_alert_rule_channel_id"))

    op.drop_table("alert_rule")
    op.drop_table("alert_channel")

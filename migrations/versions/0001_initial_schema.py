"""Initial schema: projects, runs and their segments, events, metric series and sample traces
as compact array chunks, checkpoints with their state components, ingest jobs and findings.

Revision ID: 0001
Revises:
Create Date: 2026-11-30 09:08:34.304753
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "project",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_project")),
        sa.UniqueConstraint("name", name=op.f("uq_project_name")),
    )
    op.create_table(
        "run",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=300), nullable=False),
        sa.Column("external_id", sa.String(length=200), nullable=True),
        sa.Column("source_format", sa.String(length=40), nullable=False),
        sa.Column(
            "config",
            JSON,
            nullable=False,
        ),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("dataset_size", sa.BigInteger(), nullable=True),
        sa.Column("global_batch_size", sa.Integer(), nullable=True),
        sa.Column("first_step", sa.Integer(), nullable=True),
        sa.Column("last_step", sa.Integer(), nullable=True),
        sa.Column("num_steps", sa.Integer(), nullable=False),
        sa.Column("num_segments", sa.Integer(), nullable=False),
        sa.Column("source_sha256", sa.String(length=64), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["project.id"],
            name=op.f("fk_run_project_id_project"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run")),
        sa.UniqueConstraint("project_id", "name", name=op.f("uq_run_project_id_name")),
    )
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.create_index("ix_run_external_id", ["external_id"], unique=False)
        batch_op.create_index(
            "ix_run_project_id_updated_at", ["project_id", "updated_at"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_run_status"), ["status"], unique=False)
        batch_op.create_index("ix_run_updated_at", ["updated_at"], unique=False)

    op.create_table(
        "checkpoint",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=500), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("save_started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("save_ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("consumed_samples", sa.BigInteger(), nullable=True),
        sa.Column("epoch", sa.Integer(), nullable=True),
        sa.Column("consumed_in_epoch", sa.BigInteger(), nullable=True),
        sa.Column("seed", sa.BigInteger(), nullable=True),
        sa.Column("shuffle", sa.Boolean(), nullable=True),
        sa.Column("dataset_size", sa.BigInteger(), nullable=True),
        sa.Column("global_batch_size", sa.Integer(), nullable=True),
        sa.Column(
            "data_state",
            JSON,
            nullable=True,
        ),
        sa.Column(
            "manifest",
            JSON,
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["run.id"], name=op.f("fk_checkpoint_run_id_run"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_checkpoint")),
        sa.UniqueConstraint("run_id", "name", name=op.f("uq_checkpoint_run_id_name")),
    )
    with op.batch_alter_table("checkpoint", schema=None) as batch_op:
        batch_op.create_index("ix_checkpoint_run_id_step", ["run_id", "step"], unique=False)

    op.create_table(
        "ingest_job",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("project", sa.String(length=200), nullable=False),
        sa.Column("run_name", sa.String(length=300), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("source_name", sa.String(length=500), nullable=False),
        sa.Column("source_kind", sa.String(length=20), nullable=False),
        sa.Column("source_key", sa.String(length=500), nullable=False),
        sa.Column("source_sha256", sa.String(length=64), nullable=False),
        sa.Column("source_bytes", sa.BigInteger(), nullable=False),
        sa.Column("phase", sa.String(length=40), nullable=True),
        sa.Column("progress_done", sa.BigInteger(), nullable=False),
        sa.Column("progress_total", sa.BigInteger(), nullable=False),
        sa.Column(
            "counts",
            JSON,
            nullable=False,
        ),
        sa.Column(
            "warnings",
            JSON,
            nullable=False,
        ),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"], ["run.id"], name=op.f("fk_ingest_job_run_id_run"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ingest_job")),
    )
    with op.batch_alter_table("ingest_job", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_ingest_job_run_id"), ["run_id"], unique=False)
        batch_op.create_index("ix_ingest_job_source_sha256", ["source_sha256"], unique=False)
        batch_op.create_index(
            "ix_ingest_job_state_created_at", ["state", "created_at"], unique=False
        )

    op.create_table(
        "metric_series",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=300), nullable=False),
        sa.Column("source_key", sa.String(length=300), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("num_points", sa.Integer(), nullable=False),
        sa.Column("num_superseded", sa.Integer(), nullable=False),
        sa.Column("first_step", sa.Integer(), nullable=True),
        sa.Column("last_step", sa.Integer(), nullable=True),
        sa.Column("min_value", sa.Float(), nullable=True),
        sa.Column("max_value", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"], ["run.id"], name=op.f("fk_metric_series_run_id_run"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_metric_series")),
        sa.UniqueConstraint("run_id", "key", name=op.f("uq_metric_series_run_id_key")),
    )
    op.create_table(
        "sample_chunk",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("superseded", sa.Boolean(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("first_step", sa.Integer(), nullable=False),
        sa.Column("last_step", sa.Integer(), nullable=False),
        sa.Column("num_steps", sa.Integer(), nullable=False),
        sa.Column("num_ids", sa.BigInteger(), nullable=False),
        sa.Column("id_dtype", sa.String(length=8), nullable=False),
        sa.Column("steps", sa.LargeBinary(), nullable=False),
        sa.Column("counts", sa.LargeBinary(), nullable=False),
        sa.Column("ids", sa.LargeBinary(), nullable=False),
        sa.Column("segments", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["run.id"], name=op.f("fk_sample_chunk_run_id_run"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sample_chunk")),
        sa.UniqueConstraint(
            "run_id", "superseded", "seq", name=op.f("uq_sample_chunk_run_id_superseded_seq")
        ),
    )
    op.create_table(
        "checkpoint_component",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("checkpoint_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=60), nullable=False),
        sa.Column("file", sa.String(length=500), nullable=True),
        sa.Column("bytes", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["checkpoint_id"],
            ["checkpoint.id"],
            name=op.f("fk_checkpoint_component_checkpoint_id_checkpoint"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_checkpoint_component")),
        sa.UniqueConstraint(
            "checkpoint_id", "name", name=op.f("uq_checkpoint_component_checkpoint_id_name")
        ),
    )
    op.create_table(
        "metric_chunk",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("superseded", sa.Boolean(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("first_step", sa.Integer(), nullable=False),
        sa.Column("last_step", sa.Integer(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("steps", sa.LargeBinary(), nullable=False),
        sa.Column("values", sa.LargeBinary(), nullable=False),
        sa.Column("times", sa.LargeBinary(), nullable=False),
        sa.Column("segments", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["series_id"],
            ["metric_series.id"],
            name=op.f("fk_metric_chunk_series_id_metric_series"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_metric_chunk")),
        sa.UniqueConstraint(
            "series_id", "superseded", "seq", name=op.f("uq_metric_chunk_series_id_superseded_seq")
        ),
    )
    op.create_table(
        "segment",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.Column("start_step", sa.Integer(), nullable=True),
        sa.Column("end_step", sa.Integer(), nullable=True),
        sa.Column("resumed_from", sa.String(length=500), nullable=True),
        sa.Column("resumed_from_checkpoint_id", sa.Integer(), nullable=True),
        sa.Column(
            "restored",
            JSON,
            nullable=True,
        ),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("exit_reason", sa.String(length=100), nullable=True),
        sa.Column("num_metric_rows", sa.Integer(), nullable=False),
        sa.Column("num_sample_steps", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["resumed_from_checkpoint_id"],
            ["checkpoint.id"],
            name=op.f("fk_segment_resumed_from_checkpoint_id_checkpoint"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["run.id"], name=op.f("fk_segment_run_id_run"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_segment")),
        sa.UniqueConstraint("run_id", "ordinal", name=op.f("uq_segment_run_id_ordinal")),
    )
    with op.batch_alter_table("segment", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_segment_resumed_from_checkpoint_id"),
            ["resumed_from_checkpoint_id"],
            unique=False,
        )

    op.create_table(
        "event",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("segment_id", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(length=60), nullable=False),
        sa.Column("step", sa.Integer(), nullable=True),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "payload",
            JSON,
            nullable=False,
        ),
        sa.Column("message", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"], ["run.id"], name=op.f("fk_event_run_id_run"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["segment_id"],
            ["segment.id"],
            name=op.f("fk_event_segment_id_segment"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_event")),
    )
    with op.batch_alter_table("event", schema=None) as batch_op:
        batch_op.create_index("ix_event_run_id_step", ["run_id", "step"], unique=False)
        batch_op.create_index(batch_op.f("ix_event_segment_id"), ["segment_id"], unique=False)

    op.create_table(
        "finding",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("segment_id", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(length=60), nullable=False),
        sa.Column("severity", sa.String(length=20), nullable=False),
        sa.Column("step", sa.Integer(), nullable=True),
        sa.Column("step_end", sa.Integer(), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column(
            "details",
            JSON,
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["run.id"], name=op.f("fk_finding_run_id_run"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["segment_id"],
            ["segment.id"],
            name=op.f("fk_finding_segment_id_segment"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_finding")),
    )
    with op.batch_alter_table("finding", schema=None) as batch_op:
        batch_op.create_index("ix_finding_run_id_kind", ["run_id", "kind"], unique=False)
        batch_op.create_index(batch_op.f("ix_finding_segment_id"), ["segment_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("finding", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_finding_segment_id"))
        batch_op.drop_index("ix_finding_run_id_kind")

    op.drop_table("finding")
    with op.batch_alter_table("event", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_event_segment_id"))
        batch_op.drop_index("ix_event_run_id_step")

    op.drop_table("event")
    with op.batch_alter_table("segment", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_segment_resumed_from_checkpoint_id"))

    op.drop_table("segment")
    op.drop_table("metric_chunk")
    op.drop_table("checkpoint_component")
    op.drop_table("sample_chunk")
    op.drop_table("metric_series")
    with op.batch_alter_table("ingest_job", schema=None) as batch_op:
        batch_op.drop_index("ix_ingest_job_state_created_at")
        batch_op.drop_index("ix_ingest_job_source_sha256")
        batch_op.drop_index(batch_op.f("ix_ingest_job_run_id"))

    op.drop_table("ingest_job")
    with op.batch_alter_table("checkpoint", schema=None) as batch_op:
        batch_op.drop_index("ix_checkpoint_run_id_step")

    op.drop_table("checkpoint")
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.drop_index("ix_run_updated_at")
        batch_op.drop_index(batch_op.f("ix_run_status"))
        batch_op.drop_index("ix_run_project_id_updated_at")
        batch_op.drop_index("ix_run_external_id")

    op.drop_table("run")
    op.drop_table("project")

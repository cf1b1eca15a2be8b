"""PostgreSQL: lz4 instead of pglz for the bulk array blobs (metric and sample chunks, series
previews).

A chunk blob is up to a few MB, and pglz compressing them was most of a large ingest's time in
the database (10M metric points on a loaded 2-core machine: 31 s with pglz, 8 s with lz4). lz4
keeps the saving on the columns that compress (steps, segments, counts) and gives up quickly on
the ones that do not (values, times, shuffled ids). Only values written from now on change.
Servers without lz4 (before PostgreSQL 14, or built without it) and SQLite are left as they are.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-30 16:20:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BLOBS = {
    "metric_chunk": ("steps", "values", "times", "segments"),
    "sample_chunk": ("steps", "counts", "ids", "segments"),
    "metric_series": ("preview",),
}


def _lz4_available() -> bool:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return False
    methods = bind.execute(
        sa.text("SELECT enumvals FROM pg_settings WHERE name = 'default_toast_compression'")
    ).scalar()
    return "lz4" in (methods or [])


def _set_compression(method: str) -> None:
    for table, columns in BLOBS.items():
        for column in columns:
            op.execute(f'ALTER TABLE {table} ALTER COLUMN "{column}" SET COMPRESSION {method}')


def upgrade() -> None:
    if _lz4_available():
        _set_compression("lz4")


def downgrade() -> None:
    if _lz4_available():
        _set_compression("default")

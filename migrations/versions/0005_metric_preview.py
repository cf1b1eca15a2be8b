"""A stored chart preview of long metric series (a min/max-preserving downsample), so a run
page's cost does not grow with the run. Runs ingested before this get one when re-ingested.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 11:55:31
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("metric_series", schema=None) as batch_op:
        batch_op.add_column(sa.Column("preview", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("metric_series", schema=None) as batch_op:
        batch_op.drop_column("preview")

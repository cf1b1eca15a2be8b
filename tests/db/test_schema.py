"""The migrated schema is exactly the models' schema, on SQLite and PostgreSQL."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, inspect, text

from app import migrate
from app.models import Base


def _diff(engine: Engine) -> list[object]:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(context, Base.metadata))


def test_migrated_schema_equals_the_models(engine: Engine) -> None:
    assert migrate.current_revision(engine) == migrate.head_revision(engine)
    assert _diff(engine) == []


def test_downgrade_to_base_and_upgrade_again(engine: Engine) -> None:
    migrate.downgrade(engine, "base")
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    migrate.upgrade(engine)
    assert set(Base.metadata.tables) <= set(inspect(engine).get_table_names())
    assert _diff(engine) == []


def test_chunk_blobs_use_lz4_on_postgresql(engine: Engine) -> None:
    """pglz compressing multi-MB chunk blobs bounded a large ingest on PostgreSQL (0009)."""
    if engine.dialect.name != "postgresql":
        return
    query = text(
        "SELECT attname, attcompression FROM pg_attribute"
        " WHERE attrelid = CAST(:table AS regclass) AND attnum > 0 AND NOT attisdropped"
    )
    with engine.connect() as conn:
        methods = {row[0]: row[1] for row in conn.execute(query, {"table": "metric_chunk"})}
    assert {methods[c] for c in ("steps", "values", "times", "segments")} == {"l"}
    migrate.downgrade(engine, "0008")
    with engine.connect() as conn:
        methods = {row[0]: row[1] for row in conn.execute(query, {"table": "metric_chunk"})}
    assert methods["values"] in ("", "\x00")
    migrate.upgrade(engine)

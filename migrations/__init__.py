"""Alembic migrations. Run them with ``runwatch db upgrade``; nothing migrates implicitly."""

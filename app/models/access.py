"""API tokens: shown once when created, stored only as a SHA-256 digest."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.models.base import Base, UTCDateTime, utcnow
from app.models.run import Project


class ApiToken(Base):
    __tablename__ = "api_token"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    # read < write < admin; admin also manages nodes, channels and tokens.
    scope: Mapped[str] = mapped_column(String(10))
    # None: every project. Otherwise the token reaches this project only.
    project_id: Mapped[int | None] = mapped_column(
        ForeignKey("project.id", ondelete="CASCADE"), index=True
    )
    digest: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 hex of the token
    prefix: Mapped[str] = mapped_column(String(16))  # shown in listings to tell tokens apart
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    project: Mapped[Project | None] = relationship()

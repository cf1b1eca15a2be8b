"""All configuration in one place, read from ``RUNWATCH_*`` environment variables.

The defaults are the embedded mode: a SQLite file, a serverless file-system Celery broker and the
raw-source store, all under ``RUNWATCH_HOME`` (``./.runwatch``). Production points
``RUNWATCH_DATABASE_URL`` at PostgreSQL and ``RUNWATCH_BROKER_URL`` at Redis or RabbitMQ.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from app.services.telemetry_store import Retention

MiB = 1024 * 1024
GiB = 1024 * MiB


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RUNWATCH_", extra="ignore")

    home: Path = Field(
        default=Path(".runwatch"), description="Data directory of the embedded mode."
    )
    database_url: str | None = Field(default=None, description="SQLAlchemy URL; SQLite under home.")
    broker_url: str | None = Field(
        default=None, description="Celery broker; file system under home."
    )
    source_dir: Path | None = Field(
        default=None,
        description="Where raw ingested sources are kept (home/sources). Must be shared by all "
        "workers in a multi-machine deployment.",
    )

    api_host: str = "127.0.0.1"
    api_port: int = 8765
    public_url: str | None = Field(default=None, description="Base URL used in links to run pages.")

    metric_aliases: dict[str, str] = Field(
        default_factory=dict,
        description="Extra metric-key aliases, logged key -> canonical key: {'ppl/train': 'ppl'}.",
    )

    max_upload_bytes: int = Field(default=8 * GiB, description="Largest accepted upload.")
    max_source_bytes: int = Field(
        default=64 * GiB, description="Largest total uncompressed size of one source."
    )
    max_line_bytes: int = Field(
        default=64 * MiB, description="Longest accepted line in a log file."
    )
    max_archive_members: int = Field(default=200_000, description="Most files in one archive.")
    max_compression_ratio: float = Field(
        default=200.0,
        description="Refuse archives that inflate more than this (decompression bombs).",
    )

    telemetry_raw_days: float = Field(default=7.0, description="Keep raw scrapes this long.")
    telemetry_minute_days: float = Field(default=90.0, description="Keep per-minute rollups.")
    telemetry_hour_days: float = Field(default=730.0, description="Keep per-hour rollups.")

    public_reads: bool = Field(
        default=False,
        description="Let API and dashboard reads through without a token (writes always need one).",
    )
    admin_token_file: Path | None = Field(
        default=None,
        description="Where the embedded mode writes its local admin token (home/admin-token).",
    )

    alert_max_attempts: int = Field(default=8, description="Delivery attempts before 'failed'.")
    alert_retry_base_s: float = Field(
        default=5.0, description="First retry delay of a failed delivery; doubles per attempt."
    )
    alert_retry_max_s: float = Field(default=600.0, description="Longest delay between retries.")
    alert_timeout_s: float = Field(default=10.0, description="HTTP/SMTP timeout of one delivery.")
    webhook_allow_private: bool = Field(
        default=False,
        description="Allow alert webhooks to loopback, private and link-local addresses.",
    )
    webhook_allow_hosts: list[str] = Field(
        default_factory=list,
        description="Hosts or CIDR ranges alerts may reach even when private: ['10.1.2.0/24'].",
    )
    webhook_deny_hosts: list[str] = Field(
        default_factory=list, description="Hosts or CIDR ranges alerts may never reach."
    )
    smtp_host: str | None = Field(default=None, description="SMTP server for email alerts.")
    smtp_port: int = 587
    smtp_user: str | None = None
    smtp_password: str | None = None
    smtp_starttls: bool = Field(default=True, description="Upgrade with STARTTLS when offered.")
    smtp_from: str = "runwatch@localhost"

    job_heartbeat_s: float = Field(
        default=10.0, gt=0, description="How often a worker records that a job is still alive."
    )
    job_stale_after_s: float = Field(
        default=120.0,
        gt=0,
        description="A running job whose heartbeat is older than this lost its worker: queue it "
        "again. Keep well above job_heartbeat_s (and, on SQLite, the longest run write).",
    )
    job_lost_after_s: float = Field(
        default=300.0,
        gt=0,
        description="A job queued this long, while no worker took any job for as long, lost its "
        "message: send it again.",
    )
    job_sweep_interval_s: float = Field(
        default=30.0, gt=0, description="How often beat runs the job recovery sweep."
    )
    job_max_attempts: int = Field(
        default=5,
        ge=1,
        description="Times a job may be taken by a worker; one whose worker keeps dying fails.",
    )
    broker_visibility_timeout_s: float = Field(
        default=900.0,
        gt=0,
        description="Redis: a task not acknowledged this long goes to another worker. Keep above "
        "alert_retry_max_s (delayed tasks wait unacknowledged).",
    )

    analysis_chunk_ids: int = Field(
        default=20_000_000,
        ge=1,
        description="A run whose sample trace holds more ids is analysed in parts of whole epochs"
        " of about this many ids, one task each, across the workers; smaller runs in one task.",
    )

    ingest_part_bytes: int = Field(
        default=128 << 20,
        ge=0,
        description="A sample trace (samples.jsonl) larger than this is parsed in parts of about"
        " this many bytes, one task each, across the workers; 0 parses every trace in one task.",
    )

    worker_concurrency: int = 1
    log_level: str = "INFO"

    @property
    def resolved_home(self) -> Path:
        return self.home.expanduser().resolve()

    @property
    def sqlalchemy_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.resolved_home / 'runwatch.db'}"

    @property
    def celery_broker_url(self) -> str:
        return self.broker_url or "filesystem://localhost//"

    @property
    def is_embedded_broker(self) -> bool:
        return self.celery_broker_url.startswith("filesystem://")

    @property
    def broker_dir(self) -> Path:
        return self.resolved_home / "broker"

    @property
    def sources_path(self) -> Path:
        return (self.source_dir or self.resolved_home / "sources").expanduser().resolve()

    @property
    def telemetry_retention(self) -> Retention:
        from app.services.telemetry_store import Retention

        return Retention(
            self.telemetry_raw_days, self.telemetry_minute_days, self.telemetry_hour_days
        )

    @property
    def admin_token_path(self) -> Path:
        return (self.admin_token_file or self.resolved_home / "admin-token").expanduser()

    @property
    def base_url(self) -> str:
        return (self.public_url or f"http://{self.api_host}:{self.api_port}").rstrip("/")


@lru_cache
def get_settings() -> Settings:
    return Settings()

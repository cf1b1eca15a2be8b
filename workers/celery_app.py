"""The Celery application. Embedded mode uses a file-system broker under ``RUNWATCH_HOME``
(``workers.file_broker``).

Job state and results live in the database, so no result backend is configured.
"""

from __future__ import annotations

from celery import Celery

from app.config import Settings, get_settings

QUEUES = ("ingest", "telemetry", "alerts")


def create_celery(settings: Settings) -> Celery:
    app = Celery("runwatch", broker=settings.celery_broker_url, include=["workers.tasks"])
    app.conf.update(
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue="ingest",
        task_routes={
            "runwatch.ingest": {"queue": "ingest"},
            "runwatch.refresh_live": {"queue": "ingest"},
            "runwatch.ingest_part": {"queue": "ingest"},
            "runwatch.analysis_part": {"queue": "ingest"},
            "runwatch.analysis_merge": {"queue": "ingest"},
            "runwatch.schedule_scrapes": {"queue": "telemetry"},
            "runwatch.scrape_node": {"queue": "telemetry"},
            "runwatch.compact_telemetry": {"queue": "telemetry"},
            "runwatch.deliver_alert": {"queue": "alerts"},
            "runwatch.sweep_alerts": {"queue": "alerts"},
            "runwatch.recover_jobs": {"queue": "alerts"},  # not behind a long ingest backlog
        },
        beat_schedule={
            "schedule-scrapes": {"task": "runwatch.schedule_scrapes", "schedule": 1.0},
            "compact-telemetry": {"task": "runwatch.compact_telemetry", "schedule": 600.0},
            "sweep-alerts": {"task": "runwatch.sweep_alerts", "schedule": 60.0},
            "recover-jobs": {
                "task": "runwatch.recover_jobs",
                "schedule": settings.job_sweep_interval_s,
            },
        },
        beat_schedule_filename=str(settings.resolved_home / "celerybeat-schedule"),
        task_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        broker_transport_options=_transport_options(settings),
    )
    if settings.is_embedded_broker:
        app.conf.broker_transport = "workers.file_broker:Transport"
    return app


def _transport_options(settings: Settings) -> dict[str, object]:
    if not settings.is_embedded_broker:
        # Redis hands an unacknowledged task to another worker after this long (default one
        # hour); ingest jobs are recovered sooner by their heartbeat, and a second delivery of
        # a job still running is refused by its claim. Ignored by RabbitMQ.
        return {"visibility_timeout": settings.broker_visibility_timeout_s}
    queue_dir = settings.broker_dir / "queue"
    control_dir = settings.broker_dir / "control"
    for folder in (queue_dir, control_dir):
        folder.mkdir(parents=True, exist_ok=True)
    return {
        "data_folder_in": str(queue_dir),
        "data_folder_out": str(queue_dir),
        "control_folder": str(control_dir),
        "polling_interval": 0.2,
    }


celery_app = create_celery(get_settings())

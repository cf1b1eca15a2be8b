"""Celery application and tasks."""

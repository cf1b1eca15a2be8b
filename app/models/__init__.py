"""The relational model. Import from here so every table is registered on ``Base.metadata``."""

from app.models.access import ApiToken
from app.models.alert import Alert, AlertChannel, AlertDelivery, AlertRule, AlertSilence
from app.models.analysis import AnalysisBatch, AnalysisPart
from app.models.base import Base
from app.models.checkpoint import Checkpoint, CheckpointComponent
from app.models.finding import Finding
from app.models.ingest_parts import IngestBatch, IngestPart
from app.models.job import IngestJob
from app.models.run import Event, Project, Run, Segment
from app.models.series import MetricChunk, MetricSeries, SampleChunk
from app.models.stream import StreamBatch
from app.models.tag import RunTag
from app.models.telemetry import Node, TelemetryRollup, TelemetryScrape, TelemetrySeries

__all__ = [
    "Alert",
    "AlertChannel",
    "AlertDelivery",
    "AlertRule",
    "AlertSilence",
    "AnalysisBatch",
    "AnalysisPart",
    "ApiToken",
    "Base",
    "Checkpoint",
    "CheckpointComponent",
    "Event",
    "Finding",
    "IngestBatch",
    "IngestJob",
    "IngestPart",
    "MetricChunk",
    "MetricSeries",
    "Node",
    "Project",
    "Run",
    "RunTag",
    "SampleChunk",
    "Segment",
    "StreamBatch",
    "TelemetryRollup",
    "TelemetryScrape",
    "TelemetrySeries",
]

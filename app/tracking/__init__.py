"""Training-side logging: write a run directory (and optionally stream it) while training.

``RunLogger`` needs only the standard library. The PyTorch helpers import torch lazily; the
Hugging Face and Lightning callbacks live in ``app.tracking.hf`` and ``app.tracking.lightning``
and import their framework when imported.
"""

from app.tracking.logger import RunLogger
from app.tracking.stream import StreamStatus
from app.tracking.torch_helpers import RecordingSampler, SampleIdDataset, StepRecorder

__all__ = ["RecordingSampler", "RunLogger", "SampleIdDataset", "StepRecorder", "StreamStatus"]

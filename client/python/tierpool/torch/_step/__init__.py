"""The whole-step integration behind ``tierpool.torch.offload`` (job.py)."""

from .job import OffloadJob
from .report import StepReport

__all__ = ["OffloadJob", "StepReport"]

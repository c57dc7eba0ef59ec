"""Flink's Async I/O on asyncio: the async wait operator and its watermark tools.

Pure standard library: nothing here knows Spark, Airflow or HTTP.
"""

from .deadline import Deadline
from .elements import MAX_WATERMARK, MIN_WATERMARK, Failure, Result, Watermark, WatermarkStatus
from .metrics import OperatorMetrics
from .operator import AsyncWaitOperator, OperatorOutput
from .record_timer import calling_timer, pause_with, untimed, work_for
from .retry import RetryStrategy
from .snapshot import OperatorSnapshot
from .watermark_generator import BoundedOutOfOrdernessGenerator
from .watermark_valve import WatermarkValve

__all__ = [
    "MAX_WATERMARK",
    "MIN_WATERMARK",
    "AsyncWaitOperator",
    "BoundedOutOfOrdernessGenerator",
    "Deadline",
    "Failure",
    "OperatorMetrics",
    "OperatorOutput",
    "OperatorSnapshot",
    "Result",
    "RetryStrategy",
    "Watermark",
    "WatermarkStatus",
    "WatermarkValve",
    "calling_timer",
    "pause_with",
    "untimed",
    "work_for",
]

"""Flink's Async I/O on asyncio: the async wait operator and its watermark tools.

Pure standard library: nothing here knows Spark, Airflow or HTTP.
"""

from .elements import MAX_WATERMARK, Failure, Result, StreamStatus, Watermark
from .metrics import OperatorMetrics
from .operator import AsyncWaitOperator, Output
from .record_timer import untimed
from .retry import RetryStrategy
from .snapshot import OperatorSnapshot
from .watermark_generator import BoundedOutOfOrdernessGenerator
from .watermark_valve import MIN_WATERMARK, WatermarkValve

__all__ = [
    "MAX_WATERMARK",
    "MIN_WATERMARK",
    "AsyncWaitOperator",
    "BoundedOutOfOrdernessGenerator",
    "Failure",
    "OperatorMetrics",
    "OperatorSnapshot",
    "Output",
    "Result",
    "RetryStrategy",
    "StreamStatus",
    "Watermark",
    "WatermarkValve",
    "untimed",
]

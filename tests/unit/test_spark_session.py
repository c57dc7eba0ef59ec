"""The job's Spark session settings that need no JVM (``session/spark_session.py``)."""

from __future__ import annotations

from spark_jobs.session.spark_session import SPARK_REDACTION_REGEX, redaction_regex


def test_the_redaction_pattern_keeps_the_launchs_own_and_adds_the_secret_variables():
    otlp = "OTEL_EXPORTER_OTLP_HEADERS|OTEL_EXPORTER_OTLP_METRICS_HEADERS"
    assert redaction_regex(None, ["CRM_KEY"]) == f"{SPARK_REDACTION_REGEX}|{otlp}|CRM_KEY"
    assert redaction_regex("(?i)mine", ["A.B"]) == f"(?i)mine|{otlp}|A\\.B", "never replaced"

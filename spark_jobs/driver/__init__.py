"""The run on the driver: reading and partitioning the input, publishing, the summary,
progress and how a run ends (``job.py`` wires them). The Spark session it runs in is
:mod:`spark_jobs.session`; the per-partition work is :mod:`spark_jobs.partition_runner`."""

"""The job on the driver: the Spark session, reading and partitioning the input,
publishing, the summary and how a run ends (``job.py`` wires them; the per-partition
work is :mod:`spark_jobs.partition_runner`)."""

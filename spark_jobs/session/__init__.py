"""The session a run works in, started before any data moves: the driver JVM's options
and its class archive (``jvm.py``, ``class_archive.py``, written by
``write_class_archive.py``), Spark Connect (``connect.py``), the Spark session and Spark's
own logging (``spark_session.py``, ``spark_logging.py``), and what the executors offer
(``executor_check.py``, ``task_slots.py``). Below the run (:mod:`spark_jobs.driver`),
which starts it; the Airflow side never imports it."""

"""The typed records that cross layers: one module per record, each a frozen dataclass
with its one parser (``from_json``) and writer (``to_json``).

A record written by one layer and read by another (the driver's summary, read by the
Airflow task, the DAG and the snapshot page) lives here rather than in either layer, so
a reader needs nothing of the writer's layer. A leaf: standard library only, nothing of
``spark_jobs`` (``tests/unit/test_layers.py``), so the DAG and Airflow's web server import
it without Spark or aiohttp.
"""

"""``make bench-peers``: this job beside what users would write instead, on the same Spark,
input and API (see ``benchmarks/peers/run.py``)."""

"""The Spark enrichment job's entry: ``spark-submit spark_jobs/enrich_job.py ...`` (or
``python -m spark_jobs.enrich_job ...``, which runs Spark ``local[*]``).

Only the entry: the job is :mod:`spark_jobs.driver.job`.
"""

import sys

from spark_jobs.driver.job import main

if __name__ == "__main__":
    sys.exit(main())

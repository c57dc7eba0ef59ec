"""Airflow plugin for resumable enrichment, installed as ``enrichment_airflow`` (the wheel) or
imported from Airflow's plugins folder (by its entry file ``resumable_enrichment.py``).

- ``enrichment_airflow.enrichment_operator.ResumableEnrichmentOperator``: spark-submit that
  resumes
- ``enrichment_airflow.discard_operator.DiscardSnapshotsOperator``: force a fresh start
- ``enrichment_airflow.web``: the snapshot progress page and its JSON API (FastAPI)
- ``enrichment_airflow.plugin.ResumableEnrichmentPlugin``: the registration

Nothing is imported here, so importing one piece never drags in the others.
"""

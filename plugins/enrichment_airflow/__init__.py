"""Airflow plugin for resumable enrichment.

- ``enrichment_airflow.enrichment_operator.ResumableEnrichmentOperator``: spark-submit that resumes
- ``enrichment_airflow.discard_operator.DiscardSnapshotsOperator``: force a fresh start
- ``enrichment_airflow.web``: the snapshot progress page and its JSON API (FastAPI)
- ``enrichment_airflow.plugin.ResumableEnrichmentPlugin``: the registration

Nothing is imported here, so importing one piece never drags in the others.
"""

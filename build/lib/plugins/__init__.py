"""Airflow plugin for resumable enrichment.

- ``plugins.enrichment_operator.ResumableEnrichmentOperator``: spark-submit that resumes
- ``plugins.discard_operator.DiscardSnapshotsOperator``: force a fresh start
- ``plugins.web``: the snapshot progress page and its JSON API (FastAPI)
- ``plugins.resumable_enrichment.ResumableEnrichmentPlugin``: the registration

Nothing is imported here, so importing one piece never drags in the others.
"""

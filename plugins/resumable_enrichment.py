"""Airflow's plugins folder entry: the plugin itself is the package ``enrichment_airflow``.

Airflow imports every ``.py`` of its plugins folder as a top-level module and puts the
folder on ``sys.path``; ``.airflowignore`` keeps it out of ``enrichment_airflow/``, which is
imported as the package it is (the wheel installs the same package and registers the
plugin by the ``airflow.plugins`` entry point instead).
"""

from enrichment_airflow.plugin import ResumableEnrichmentPlugin

__all__ = ["ResumableEnrichmentPlugin"]

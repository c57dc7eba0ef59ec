"""The secrets' route into the job decided on the Spark master as the Spark provider
itself resolves it, for URI and JSON connections alike: wherever the provider would put
``env_vars`` on the spark-submit command line, the token is refused before anything is
built; where it is let through, neither the command nor the provider's "Spark-Submit
cmd" log line holds it."""

from __future__ import annotations

import json

import pytest
from airflow.providers.apache.spark.hooks import spark_submit
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from structlog.testing import capture_logs

from enrichment_airflow.enrichment_hook import EnrichmentApiHook
from spark_jobs.launch import ENRICH_JOB

from .operator_support import enrichment_operator, submit_hook

pytestmark = pytest.mark.airflow

TOKEN = "s3cr3t-token"

#: Spark connections whose master the provider treats as Kubernetes, YARN or unknown.
PRINTING = {
    "k8s URI (the issue's)": "k8s://https%3A%2F%2Fkube.example%3A6443",
    "k8s JSON, URL in host": {"conn_type": "k8s", "host": "https://kube.example:6443"},
    "spark JSON, k8s in host": {"conn_type": "spark", "host": "spark-k8s-master", "port": 7077},
    "yarn URI": "yarn://",
    "yarn JSON, cluster host": {"conn_type": "spark", "host": "yarn-cluster"},
    "mesos JSON": {"conn_type": "spark", "host": "mesos://mesos.example:5050"},
}
#: Spark connections whose master hands ``env_vars`` to spark-submit's environment only.
QUIET = {
    "local JSON": {"conn_type": "spark", "host": "local[2]"},
    "local URI": "spark://local%5B2%5D",
    "standalone URI": "spark://spark-master:7077",
    "standalone JSON": {"conn_type": "spark", "host": "spark://spark-master:7077"},
}


def spark_connection(monkeypatch, connection) -> None:
    value = connection if isinstance(connection, str) else json.dumps(connection)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_ENRICH", value)
    monkeypatch.setenv(
        "AIRFLOW_CONN_ENRICHMENT_API",
        json.dumps({"conn_type": "enrichment_api", "host": "api", "password": TOKEN}),
    )
    # The provider refuses to build any k8s command without the cncf.kubernetes provider,
    # which is not installed here; its client is used only to watch a submitted driver.
    monkeypatch.setattr(spark_submit, "kube_client", object(), raising=False)


def submit_command() -> tuple[str, str]:
    """What the operator's ``execute`` does up to the submission: the secrets' route,
    then the provider's command; (command, the provider's "Spark-Submit cmd" lines)."""
    operator = enrichment_operator()
    env, _ = EnrichmentApiHook().token_route(operator._spark_master())
    operator.env_vars = env
    hook = submit_hook(operator)
    with capture_logs() as events:  # Airflow 3 logs through structlog
        command = hook._build_spark_submit_command(ENRICH_JOB)
    logged = [str(e) for e in events if "Spark-Submit cmd" in str(e.get("event"))]
    assert logged and "--master" in logged[0], "the provider logs its command"
    return " ".join(command), "\n".join(logged)


@pytest.mark.parametrize("connection", PRINTING.values(), ids=PRINTING.keys())
def test_airflow_token_is_refused_wherever_the_provider_would_print_it(monkeypatch, connection):
    spark_connection(monkeypatch, connection)
    try:
        command, logged = submit_command()
    except ValueError as refused:
        assert "would reach the spark-submit command line" in str(refused)
        assert TOKEN not in str(refused)
        return
    assert TOKEN not in command, "the token is on the spark-submit command line"
    assert TOKEN not in logged, "the token is in the provider's Spark-Submit cmd line"
    pytest.fail("a master the provider treats as YARN/Kubernetes/unknown was let through")


@pytest.mark.parametrize("connection", QUIET.values(), ids=QUIET.keys())
def test_airflow_token_travels_by_environment_on_local_and_standalone_masters(
    monkeypatch, connection
):
    spark_connection(monkeypatch, connection)
    command, logged = submit_command()
    assert TOKEN not in command and TOKEN not in logged


@pytest.mark.parametrize(
    "connection", [*PRINTING.values(), *QUIET.values()], ids=[*PRINTING, *QUIET]
)
def test_airflow_operator_resolves_the_master_as_the_provider_does(monkeypatch, connection):
    spark_connection(monkeypatch, connection)
    provider = SparkSubmitHook(conn_id="spark_enrich")
    assert enrichment_operator()._spark_master() == provider._connection["master"]

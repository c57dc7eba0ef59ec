"""The Airflow operator's spark-submit command, rendered by the Spark provider's own hook:
what a YARN or Kubernetes user's cluster receives when the job's environment is shipped."""

from __future__ import annotations

import json

import pytest

from enrichment_airflow.enrichment_hook import EnrichmentApiHook
from enrichment_airflow.enrichment_operator import ResumableEnrichmentOperator
from enrichment_airflow.job_arguments import job_arguments
from spark_jobs.launch import ENRICH_JOB
from spark_jobs.snapshots import NamespaceKey

from .operator_support import enrichment_operator, submit_hook

pytestmark = pytest.mark.airflow


# k8s:// masters need the cncf.kubernetes provider installed to build a command at all.
@pytest.mark.parametrize("master", ["yarn", "spark://spark-master:7077"])
def test_the_shipped_environment_travels_with_files_and_runs_as_the_executors_python(
    monkeypatch, tmp_path, master
):
    pex = tmp_path / "enrich_env.pex"
    pex.write_bytes(b"PK")
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_ENRICH", json.dumps({"conn_type": "spark", "host": master})
    )
    operator = ResumableEnrichmentOperator(
        task_id="enrich",
        input_path="s3://bucket/in",
        output_path="s3://bucket/out",
        key_column="id",
        url_path="/customers/{id}",
        response_fields={"name": "$.name"},
        ship_environment=str(pex),
        files="/opt/extra/lookup.csv",
    )
    command = submit_hook(operator)._build_spark_submit_command(ENRICH_JOB)
    assert command[command.index("--files") + 1] == f"/opt/extra/lookup.csv,{pex}"
    confs = [command[i + 1] for i, arg in enumerate(command) if arg == "--conf"]
    assert "spark.pyspark.python=./enrich_env.pex" in confs
    assert command[command.index("--master") + 1] == master


@pytest.mark.parametrize(
    "where",
    ["https://evil.example/enrich_env.pex", "missing.pex", "program.py", "directory.pex"],
)
def test_airflow_shipped_environment_must_be_an_existing_local_pex_file(
    monkeypatch, tmp_path, where
):
    """Every executor runs it as its Python, and the path comes from an Airflow Variable."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_ENRICH", json.dumps({"conn_type": "spark", "host": "local[2]"})
    )
    (tmp_path / "program.py").write_text("print('not the runtime')\n")
    (tmp_path / "directory.pex").mkdir()
    path = where if "://" in where else str(tmp_path / where)
    operator = enrichment_operator(ship_environment=path)
    with pytest.raises(ValueError, match="enrichment_ship_environment") as refused:
        submit_hook(operator)
    assert "must be an existing local .pex file" in str(refused.value)
    assert path in str(refused.value)


def test_without_a_shipped_environment_nothing_is_added(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_ENRICH", json.dumps({"conn_type": "spark", "host": "local[2]"})
    )
    operator = ResumableEnrichmentOperator(
        task_id="enrich",
        input_path="in",
        output_path="out",
        key_column="id",
        url_path="/customers/{id}",
        response_fields={"name": "$.name"},
    )
    command = submit_hook(operator)._build_spark_submit_command(ENRICH_JOB)
    assert "--files" not in command and "spark.pyspark.python" not in " ".join(command)


def api_connection(monkeypatch, token: str) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_ENRICHMENT_API",
        json.dumps({"conn_type": "enrichment_api", "host": "api", "password": token}),
    )


@pytest.mark.parametrize("master", ["yarn", "k8s://https://cluster.example:6443"])
def test_the_token_is_refused_where_it_would_reach_the_command_line(monkeypatch, master):
    api_connection(monkeypatch, "s3cr3t-token")
    with pytest.raises(ValueError, match="would reach the spark-submit command line") as caught:
        EnrichmentApiHook().token_route(master)
    assert "s3cr3t-token" not in str(caught.value) and "token_file" in str(caught.value)


def test_locally_the_token_travels_by_environment_only(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_ENRICH", json.dumps({"conn_type": "spark", "host": "local[2]"})
    )
    api_connection(monkeypatch, "s3cr3t-token")
    submit = enrichment_operator()
    env, args = EnrichmentApiHook().token_route(submit._spark_master())
    assert args == ["--token-env", "ENRICHMENT_API_TOKEN"]
    submit.env_vars = env
    command = submit_hook(submit)._build_spark_submit_command(ENRICH_JOB)
    assert "s3cr3t-token" not in " ".join(command)


def test_a_url_path_that_could_change_the_host_is_refused():
    with pytest.raises(ValueError, match="url_path must start with '/'"):
        enrichment_operator(url_path="@evil.example/x/{id}")


@pytest.mark.parametrize(("deploy_mode", "quieted"), [(None, True), ("cluster", False)])
def test_the_driver_starts_with_the_jobs_log4j2_file_unless_it_runs_elsewhere(
    monkeypatch, deploy_mode, quieted
):
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_ENRICH", json.dumps({"conn_type": "spark", "host": "yarn"})
    )
    operator = enrichment_operator(
        deploy_mode=deploy_mode,
        spark_log_level="INFO",
        conf={"spark.driver.extraJavaOptions": "-Xss4m"},
    )
    command = submit_hook(operator)._build_spark_submit_command(ENRICH_JOB)
    confs = [command[i + 1] for i, arg in enumerate(command) if arg == "--conf"]
    options = next(c for c in confs if c.startswith("spark.driver.extraJavaOptions="))
    assert options.startswith("spark.driver.extraJavaOptions=-Xss4m")  # the user's kept
    assert ("log4j2.properties" in options) == quieted
    assert ("-Denrich_job.spark_log_level=INFO" in options) == quieted


def test_standalone_cluster_mode_submits_the_python_job_as_pythonrunner_over_rest(monkeypatch):
    """Spark refuses .py applications in standalone cluster mode: the job goes as Spark's
    PythonRunner with the job's file first, once however often the hook is built;
    spark-submit takes the REST route; durable is on, explicitly."""
    from enrichment_airflow.cluster_run import PYTHON_RUNNER, launcher_jar

    cluster = {"deploy-mode": "cluster", "rest-port": 6066}
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_ENRICH",
        json.dumps({"conn_type": "spark", "host": "spark://master:6066", "extra": cluster}),
    )
    operator = enrichment_operator()
    assert operator.durable is True and enrichment_operator(durable=False).durable is False
    operator.application_args = ["--input", "in"]
    command = submit_hook(operator)._build_spark_submit_command(operator.application)
    assert command[command.index("--class") + 1] == PYTHON_RUNNER
    tail = [launcher_jar(), ENRICH_JOB, "", "--input", "in"]  # jar, file, py-files, flags
    assert command[command.index(launcher_jar()) :] == tail
    confs = [command[i + 1] for i, arg in enumerate(command) if arg == "--conf"]
    assert "spark.master.rest.enabled=true" in confs
    assert submit_hook(operator)._build_spark_submit_command(operator.application) == command


def test_over_spark_connect_the_token_of_the_connect_url_stays_hidden(monkeypatch):
    """A ``spark_connect`` connection's password is a token in its URL: the operator's
    master (used in messages and the secrets' route) hides it; the API's token goes by
    environment to the Connect client, whose command line never holds it."""
    connection = {"conn_type": "spark_connect", "host": "connect.example", "port": 443}
    monkeypatch.setenv(
        "AIRFLOW_CONN_SC",
        json.dumps({**connection, "password": "sc-t0ken", "extra": {"use_ssl": True}}),
    )
    api_connection(monkeypatch, "s3cr3t-token")
    operator = enrichment_operator(spark_connect_conn_id="sc")
    master = operator._spark_master()
    assert master == "sc://connect.example:443/;token=***;use_ssl=True"
    env, args = EnrichmentApiHook().token_route(master)
    assert env == {"ENRICHMENT_API_TOKEN": "s3cr3t-token"} and "s3cr3t-token" not in args


def test_over_spark_connect_a_shipped_environment_is_refused_not_ignored(tmp_path):
    pex = tmp_path / "enrich_env.pex"
    pex.write_bytes(b"PK")
    operator = enrichment_operator(spark_connect_conn_id="sc", ship_environment=str(pex))
    with pytest.raises(ValueError, match="ship_environment: a PEX cannot become a Spark Connect"):
        operator._submit({})


def test_airflow_operator_uses_no_private_name_of_the_spark_provider():
    """The operator and its helpers reach the provider through its constructor arguments,
    templated attributes and ``ResumableJobMixin`` methods only: a private name of
    ``SparkSubmitOperator`` (``_conn_id``, ``_get_hook``, ``_java_class``...) may change in
    any provider release without notice."""
    import ast
    import inspect

    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk import BaseOperator

    from enrichment_airflow import (
        cluster_run,
        connect_job,
        enrichment_operator,
        job_arguments,
        spark_master,
    )

    provider = set(vars(SparkSubmitOperator(task_id="probe"))) | set(vars(SparkSubmitOperator))
    provider -= set(vars(BaseOperator(task_id="probe"))) | set(dir(BaseOperator))
    private = {name for name in provider if name.startswith("_") and not name.endswith("__")}
    assert {"_conn_id", "_get_hook", "_java_class", "_deploy_mode"} <= private
    for module in (enrichment_operator, cluster_run, job_arguments, connect_job, spark_master):
        tree = ast.parse(inspect.getsource(module))
        names = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        names |= {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
        assert not names & private, f"{module.__name__} uses {sorted(names & private)}"


def test_model_mode_becomes_the_jobs_flag_and_an_unset_one_none(monkeypatch, tmp_path):
    api_connection(monkeypatch, "s3cr3t-token")
    hook = EnrichmentApiHook(snapshot_root=str(tmp_path))
    key = NamespaceKey("dag", "enrich", "2026-12-01T00:00:00+00:00")

    def arguments(**overrides: str) -> list[str]:
        return job_arguments(enrichment_operator(**overrides), hook, key, "run", [])

    batch = arguments(model_mode="batch")
    assert batch[batch.index("--model-mode") + 1] == "batch"
    assert "--model-mode" not in arguments(model_mode="None")  # a template left unset

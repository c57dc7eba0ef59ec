"""The Airflow side's wiring: ``EnrichmentApiHook`` resolves the API connection and the
token's route, the operator builds the job's flags from its parameters (which the job's
own parser accepts), refuses ``application_args`` it would replace, and documents every
parameter; the hook's connection type is registered the provider way."""

from __future__ import annotations

import inspect
import json
import re
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from enrichment_airflow.discard_operator import DiscardSnapshotsOperator
from enrichment_airflow.enrichment_hook import TOKEN_ENV, EnrichmentApiHook
from enrichment_airflow.enrichment_operator import ResumableEnrichmentOperator
from enrichment_airflow.job_arguments import job_arguments
from spark_jobs import defaults
from spark_jobs.snapshots import NamespaceKey
from spark_jobs.spec.job_cli import parse_args

from .operator_support import enrichment_operator

pytestmark = pytest.mark.airflow

TOKEN = "s3cr3t-token"


@pytest.fixture
def connections(monkeypatch):
    def set_connections(master: str = "local[2]", token: str | None = TOKEN) -> None:
        api = {"conn_type": "enrichment_api", "host": "api.example.com", "schema": "https"}
        if token:
            api["password"] = token
        monkeypatch.setenv("AIRFLOW_CONN_ENRICHMENT_API", json.dumps({**api, "port": 8443}))
        monkeypatch.setenv(
            "AIRFLOW_CONN_SPARK_ENRICH", json.dumps({"conn_type": "spark", "host": master})
        )

    set_connections()
    return set_connections


def operator(**overrides):
    fields = {"name": "$.name", "score": "$.score:float"}
    return enrichment_operator(
        **{"response_fields": fields, "snapshot_root": "/tmp/snapshots", **overrides}
    )


def test_airflow_hook_builds_the_url_from_the_connection(connections):
    hook = EnrichmentApiHook()
    assert hook.base_url == "https://api.example.com:8443"
    assert hook.url_template("/customers/{id}") == "https://api.example.com:8443/customers/{id}"
    assert hook.get_conn().host == "api.example.com"


def test_airflow_hook_declares_its_connection_like_a_provider_hook():
    assert EnrichmentApiHook.conn_name_attr == "api_conn_id"
    assert EnrichmentApiHook.default_conn_name == "enrichment_api"
    assert (EnrichmentApiHook.conn_type, EnrichmentApiHook.hook_name) == (
        "enrichment_api",
        "Enrichment API",
    )
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    info = ProvidersManagerTaskRuntime().hooks["enrichment_api"]
    assert info is not None
    assert info.hook_class_name == "enrichment_airflow.enrichment_hook.EnrichmentApiHook"
    assert info.connection_id_attribute_name == "api_conn_id"


def test_airflow_hook_routes_the_token_by_environment_locally(connections):
    env, args = EnrichmentApiHook().token_route("local[2]")
    assert env == {TOKEN_ENV: TOKEN} and args == ["--token-env", TOKEN_ENV]
    connections(token=None)
    assert EnrichmentApiHook().token_route("local[2]") == ({}, [])


@pytest.mark.parametrize("master", ["yarn", "k8s://https://cluster.example:6443"])
def test_airflow_operator_refuses_the_token_before_anything_reaches_spark_submit(
    connections, master
):
    connections(master=master)
    submit = operator(env_vars={"A": "1"})
    context = {
        "ti": SimpleNamespace(dag_id="d", task_id="enrich", map_index=-1, try_number=1),
        "data_interval_start": datetime(2024, 1, 1, tzinfo=UTC),
        "logical_date": datetime(2024, 1, 1, tzinfo=UTC),
        "run_id": "manual__1",
    }
    with pytest.raises(ValueError, match="would reach the spark-submit command line") as caught:
        submit.execute(context)
    assert TOKEN not in str(caught.value) and "token_file" in str(caught.value)
    assert submit.env_vars == {"A": "1"} and not submit.application_args


def test_airflow_operator_flags_are_what_the_job_parses(connections):
    submit = operator(
        event_time_column="event_time",
        cache_dir="",  # a template that rendered nothing
        cache_ttl="None",
        max_requests="100",
        job_args=["--timeout", "10"],
    )
    key = NamespaceKey("d", "enrich", "2024-01-01T00:00:00+00:00")
    api = EnrichmentApiHook(snapshot_root="/tmp/snapshots")
    args = job_arguments(submit, api, key, "run-1", ["--token-env", TOKEN_ENV])
    spec = parse_args(args)
    assert spec.url_template == "https://api.example.com:8443/customers/{id}"
    assert spec.response_fields["score"].type == "float" and spec.event_time_column == "event_time"
    assert (spec.dag_id, spec.interval_start, spec.run_id) == ("d", key.interval_start, "run-1")
    assert spec.cache_dir is None and spec.cache_ttl == defaults.CACHE_TTL
    assert spec.max_requests == 100 and spec.timeout == 10
    assert spec.http["token_env"] == TOKEN_ENV
    assert (spec.partitions, spec.capacity, spec.resume) == (
        defaults.PARTITIONS,
        defaults.CAPACITY,
        defaults.RESUME,
    )


def test_airflow_operator_passes_input_options_and_a_composite_key(connections):
    submit = operator(
        key_column=["region", "id"],
        url_path="/customers/{region}/{id}",
        input_options={"sep": ";", "encoding": "latin1"},
        input_format="csv",
    )
    key = NamespaceKey("d", "enrich", "x")
    api = EnrichmentApiHook(snapshot_root="/tmp/snapshots")
    spec = parse_args(job_arguments(submit, api, key, "run-1", []))
    assert spec.input_options == {"sep": ";", "encoding": "latin1"}
    assert spec.key_columns == ("region", "id") and spec.input_format == "csv"
    refused = operator(input_options={"mode": "DROPMALFORMED"})
    with pytest.raises(ValueError, match="--input-option mode: refused"):
        parse_args(job_arguments(refused, api, key, "run-1", []))


def test_airflow_operator_refuses_an_unknown_resume_mode(connections):
    submit = operator(resume="sometimes")
    key = NamespaceKey("d", "enrich", "x")
    with pytest.raises(ValueError, match="resume must be one of"):
        job_arguments(submit, EnrichmentApiHook(), key, "run-1", [])


@pytest.mark.parametrize("where", ["argument", "default_args"])
def test_airflow_operator_refuses_application_args_it_would_replace(where):
    given = ["--timeout", "10"]
    kwargs = (
        {"application_args": given}
        if where == "argument"
        else {"default_args": {"application_args": given}}
    )
    with pytest.raises(
        ValueError, match=r"application_args.*pass further enrich_job flags as job_args"
    ):
        operator(**kwargs)


@pytest.mark.parametrize("operator_class", [ResumableEnrichmentOperator, DiscardSnapshotsOperator])
def test_airflow_operators_document_every_parameter_and_mark_the_templated_ones(operator_class):
    doc = inspect.getdoc(operator_class) or ""
    paragraphs = dict(re.findall(r":param (\w+): (.*?)(?=\n:param |\Z)", doc, flags=re.S))
    own = set(inspect.signature(operator_class.__init__).parameters) - {"self"}
    own -= {"kwargs"} if operator_class is DiscardSnapshotsOperator else set()  # BaseOperator's
    assert own <= set(paragraphs), f"undocumented: {sorted(own - set(paragraphs))}"
    templated = set(operator_class.template_fields)
    for name in own - {"kwargs"}:
        marked = "(templated)" in paragraphs[name]
        assert marked == (name in templated), f"{name}: templated={name in templated}"


def test_airflow_hook_sends_no_bearer_token_beside_secret_headers_unless_asked(monkeypatch):
    api = {"conn_type": "http", "host": "geo.example.com", "password": TOKEN}
    api["extra"] = json.dumps({"api_key": "extra-key"})
    monkeypatch.setenv("AIRFLOW_CONN_GEO", json.dumps(api))
    hook = EnrichmentApiHook("geo")
    header_env = "ENRICHMENT_API_HEADER_X_API_KEY"
    env, args = hook.token_route("local[2]", secret_headers={"X-Api-Key": "password"})
    assert env == {header_env: TOKEN} and args == ["--secret-header", f"X-Api-Key={header_env}"]
    env, args = hook.token_route("local[2]", "extra.api_key", {"X-Api-Key": "password"})
    assert env == {TOKEN_ENV: "extra-key", header_env: TOKEN}
    assert args[:2] == ["--token-env", TOKEN_ENV]
    assert hook.token_route("local[2]", "none") == ({}, [])
    assert TOKEN not in " ".join(args)


@pytest.mark.parametrize(
    ("bearer", "secret_headers", "message"),
    [
        (
            "auto",
            {"X-Api-Key": "extra.missing"},
            "secret_headers.X-Api-Key: connection 'geo' has no extra.missing",
        ),
        ("login", {}, "bearer_token: expected 'password' or 'extra.<key>'"),
        ("auto", {"X-Api-Key": "password", "x_api_key": "password"}, "given twice"),
    ],
)
def test_airflow_hook_names_the_parameter_of_a_bad_secret_source(
    monkeypatch, bearer, secret_headers, message
):
    api = {"conn_type": "http", "host": "geo.example.com", "password": TOKEN}
    monkeypatch.setenv("AIRFLOW_CONN_GEO", json.dumps(api))
    with pytest.raises(ValueError, match=re.escape(message)) as caught:
        EnrichmentApiHook("geo").token_route("local[2]", bearer, secret_headers)
    assert TOKEN not in str(caught.value)


def test_airflow_hook_refuses_secret_headers_where_spark_prints_the_environment(monkeypatch):
    api = {"conn_type": "http", "host": "geo.example.com", "password": TOKEN}
    monkeypatch.setenv("AIRFLOW_CONN_GEO", json.dumps(api))
    with pytest.raises(ValueError, match="would reach the spark-submit command line"):
        EnrichmentApiHook("geo").token_route("yarn", "none", {"X-Api-Key": "password"})


def test_airflow_operator_request_parameters_are_what_the_job_parses(connections):
    submit = operator(
        method="POST",
        body_template={"address": "{street}", "limit": 1},
        headers={"Accept": "application/json"},
        spark_log_level="INFO",
    )
    key = NamespaceKey("d", "enrich", "2024-01-01T00:00:00+00:00")
    api = EnrichmentApiHook(snapshot_root="/tmp/snapshots")
    secret_args = ["--secret-header", "X-Api-Key=ENRICHMENT_API_HEADER_X_API_KEY"]
    spec = parse_args(job_arguments(submit, api, key, "run-1", secret_args))
    config = spec.http_config()
    assert (config.method, config.body_template) == ("POST", {"address": "{street}", "limit": 1})
    assert config.headers == {"Accept": "application/json"} and spec.spark_log_level == "INFO"
    assert config.secret_headers == {"X-Api-Key": "ENRICHMENT_API_HEADER_X_API_KEY"}
    assert config.token_env is None

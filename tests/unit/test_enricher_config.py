"""HttpEnricherConfig: validation names the field, JSON round trip, fingerprint, no secrets."""

import json

import pytest

from spark_jobs.enrichers import HttpEnricherConfig, ResponseField

URL = "https://api.example.com/customers/{customer_id}"


def config(**overrides):
    fields = {"url_template": URL, "response_fields": {"city": "$.address.city"}}
    return HttpEnricherConfig.from_dict({**fields, **overrides})


def test_defaults_and_response_field_shapes():
    cfg = config(
        response_fields={
            "city": "$.address.city",
            "score": ["$.score", "float"],
            "first": {"path": "$.items[0].name", "type": "string"},
            "raw": ResponseField("$", "json"),
        }
    )
    assert cfg.method == "GET"
    assert cfg.response_fields["city"] == ResponseField("$.address.city", "string")
    assert cfg.response_fields["score"] == ResponseField("$.score", "float")
    assert cfg.response_fields["first"].path == "$.items[0].name"
    assert cfg.rate_per_partition is None


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"method": "FETCH"}, "method"),
        ({"url_template": None}, "url_template"),
        ({"url_template": "ftp://host/{x}"}, "url_template"),
        ({"url_template": "http://{host}/x"}, "url_template"),
        ({"url_template": "http://h:99999/{x}"}, "url_template"),
        ({"url_template": "http://h/{x!r}"}, "url_template"),
        ({"url_template": "http://h/{x:>5}"}, "url_template"),
        ({"url_template": "http://h/{0}"}, "url_template"),
        ({"url_template": "http://h/{x"}, "url_template"),
        ({"response_fields": {}}, "response_fields"),
        ({"response_fields": {"a": "address.city"}}, "response_fields.a"),
        ({"response_fields": {"a": ["$.a", "decimal"]}}, "response_fields.a"),
        ({"response_fields": {"a": "$.a[x]"}}, "response_fields.a"),
        ({"not_found": "skip"}, "not_found"),
        ({"headers": {"Authorization": "Bearer x"}}, "headers"),
        ({"headers": {"X-A": 1}}, "headers"),
        ({"headers": {"X-A": "a\r\nInjected: 1"}}, "headers"),
        ({"token_env": "A", "token_file": "/f"}, "token_env and token_file"),
        ({"token_env": ""}, "token_env"),
        ({"requests_per_second": 0}, "requests_per_second"),
        ({"requests_per_second": float("inf")}, "requests_per_second"),
        ({"partitions": 0}, "partitions"),
        ({"capacity": 0}, "capacity"),
        ({"capacity": True}, "capacity"),
        ({"cache_size": -1}, "cache_size"),
        ({"coalesce": "yes"}, "coalesce"),
        ({"throttle_window": 0}, "throttle_window"),
        ({"throttle_share": 1.5}, "throttle_share"),
        ({"max_response_bytes": 0}, "max_response_bytes"),
        ({"first_byte_timeout": 0}, "first_byte_timeout"),
        ({"hedge_after": "p100"}, "hedge_after"),
        ({"hedge_after": "soon"}, "hedge_after"),
        ({"hedge_after": -1}, "hedge_after"),
        ({"method": "POST", "hedge_after": 0.5}, "idempotent"),
        ({"resend_stragglers": "yes"}, "resend_stragglers"),
        ({"method": "POST", "resend_stragglers": True}, "resend_stragglers: only idempotent"),
        ({"method": "PATCH", "resend_stragglers": True}, "resend_stragglers: only idempotent"),
        ({"read_timeout": 0}, "read_timeout"),
        ({"connect_timeout": -1}, "connect_timeout"),
        ({"total_timeout": "5"}, "total_timeout"),
        ({"body_template": {"id": "{customer_id}"}}, "body_template"),  # GET has no body
        ({"method": "POST", "body_template": {"x": {1, 2}}}, "body_template"),
        ({"method": "POST", "body_template": '{"q": "{id}"}'}, "body_template must be a mapping"),
        ({"batch_size": 10}, "batch_url_template"),
    ],
)
def test_invalid_values_name_the_field(overrides, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        config(**overrides)


def test_batch_settings_are_checked():
    batch = {
        "url_template": None,
        "batch_size": 10,
        "batch_url_template": "http://h/customers/batch",
        "key_field": "customer_id",
    }
    cfg = config(**batch)
    assert cfg.batch is not None
    assert cfg.batch.size == 10 and cfg.batch.request_key == "ids"
    with pytest.raises(ValueError, match="key_field"):
        config(**{**batch, "key_field": None})
    with pytest.raises(ValueError, match="batch_url_template"):
        config(**{**batch, "batch_url_template": "http://h/batch/{x}"})
    with pytest.raises(ValueError, match="url_template"):
        config(**{**batch, "url_template": URL})
    with pytest.raises(ValueError, match="batch_size"):
        config(**{**batch, "batch_size": 0})
    with pytest.raises(ValueError, match="batch_max_wait_s"):
        config(**{**batch, "batch_max_wait_s": 0})
    with pytest.raises(ValueError, match="batch_results_path"):
        config(**{**batch, "batch_results_path": "results"})


def test_round_trip_through_json():
    cfg = config(
        method="post",
        body_template={"id": "{customer_id}", "tags": ["a", "{customer_id}-x"]},
        headers={"X-Client": "enrichment"},
        token_env="API_TOKEN",
        requests_per_second=100,
        partitions=4,
        response_fields={"city": "$.address.city", "score": ["$.score", "float"]},
    )
    data = json.loads(json.dumps(cfg.to_dict()))
    again = HttpEnricherConfig.from_dict(data)
    assert again == cfg
    assert again.method == "POST"
    assert again.rate_per_partition == 25.0
    assert data["response_fields"]["score"] == {"path": "$.score", "type": "float"}


def test_from_dict_rejects_unknown_fields():
    with pytest.raises(ValueError, match="unknown config fields: urll_template"):
        HttpEnricherConfig.from_dict({"urll_template": URL, "response_fields": {"a": "$.a"}})


def test_to_dict_holds_the_token_source_never_a_token(tmp_path, monkeypatch):
    monkeypatch.setenv("API_TOKEN", "s3cr3t-value")
    cfg = config(token_env="API_TOKEN")
    text = json.dumps(cfg.to_dict()) + repr(cfg)
    assert "API_TOKEN" in text
    assert "s3cr3t-value" not in text


def test_fingerprint_is_stable_and_sensitive_to_what_is_enriched():
    base = config()
    assert base.fingerprint() == config().fingerprint()
    assert len(base.fingerprint()) == 64
    # Same config written differently (defaults spelled out, key order, int vs float).
    spelled_out = HttpEnricherConfig.from_dict(
        {**dict(reversed(list(base.to_dict().items()))), "connect_timeout": 5}
    )
    assert spelled_out.fingerprint() == base.fingerprint()
    # Where the token comes from does not change the enrichment.
    assert config(token_env="OTHER").fingerprint() == base.fingerprint()
    assert config(token_file="/run/secret").fingerprint() == base.fingerprint()
    # Neither does tuning: a retry with more capacity or another budget still resumes.
    assert config(capacity=500, requests_per_second=50.0).fingerprint() == base.fingerprint()
    assert config(total_timeout=5.0, cache_size=0).fingerprint() == base.fingerprint()
    changed = [
        config(url_template="https://api.example.com/v2/customers/{customer_id}"),
        config(response_fields={"city": ["$.address.city", "json"]}),
        config(response_fields={"town": "$.address.city"}),
        config(not_found="fail"),
    ]
    assert len({c.fingerprint() for c in changed} | {base.fingerprint()}) == 5


def test_fingerprints_of_configs_written_before_batch_nesting_are_unchanged():
    """Hashes computed by the code before ``BatchConfig`` and the field markers (commit
    0300f7e): snapshots written then must still resume."""
    single = HttpEnricherConfig.from_dict(
        {
            "url_template": "http://h/c/{id}",
            "response_fields": {"n": "$.n", "s": ["$.s", "float"]},
            "key_field": "id",
            "headers": {"X-A": "b"},
            "method": "POST",
            "body_template": {"q": "{id}"},
        }
    )
    batch = HttpEnricherConfig.from_dict(
        {
            "response_fields": {"n": "$.n"},
            "key_field": "id",
            "batch_size": 5,
            "batch_url_template": "https://h/batch",
            "batch_request_key": "keys",
            "batch_error_field": None,
        }
    )
    assert (
        single.fingerprint() == "346e0aaaa7bf56e60e519830423f789d49b740f139a0fab83e50a8e320b3a6d4"
    )
    assert batch.fingerprint() == "cac919e5b09dd033fdd5ed0e5b8d1aa0cfed419a17e3bae61e133cc6aab62e00"
    nested = HttpEnricherConfig.from_dict(
        {**batch.to_dict(), "batch": {**batch.to_dict()["batch"]}}
    )
    assert nested == batch and nested.fingerprint() == batch.fingerprint()


def test_batch_settings_nested_or_flat_but_not_both():
    flat = {"batch_size": 5, "batch_url_template": "https://h/batch"}
    with pytest.raises(ValueError, match="nested or as batch_\\* keys, not both"):
        config(
            url_template=None,
            key_field="k",
            batch={"size": 5, "url_template": "https://h/b"},
            **flat,
        )
    with pytest.raises(ValueError, match="unknown batch settings: sise"):
        config(url_template=None, key_field="k", batch={"sise": 5, "url_template": "https://h/b"})


def test_the_fingerprint_covers_exactly_the_marked_fields():
    """Changing a field changes the fingerprint iff the field is marked ``fingerprint``."""
    import dataclasses

    marked = {
        f.name for f in dataclasses.fields(HttpEnricherConfig) if f.metadata.get("fingerprint")
    }
    assert marked == {
        "url_template", "response_fields", "method", "body_template", "headers",
        "not_found", "key_field", "batch",
    }  # fmt: skip
    base = config(method="PUT")
    assert config(method="PUT", key_field="customer_id").fingerprint() != base.fingerprint()
    assert config(method="PUT", headers={"X-V": "2"}).fingerprint() != base.fingerprint()
    assert config(method="PUT", coalesce=False).fingerprint() == base.fingerprint()
    assert config(method="PUT", hedge_after="p90").fingerprint() == base.fingerprint()
    assert config(method="PUT", resend_stragglers=True).fingerprint() == base.fingerprint()

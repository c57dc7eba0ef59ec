"""URL and body templates: encoding, typed body values, missing fields named clearly."""

import json
from urllib.parse import unquote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_jobs.enrichers import FieldValueError, MissingFieldError
from spark_jobs.enrichers.templates import BodyTemplate, TemplateError, UrlTemplate


def test_url_values_are_percent_encoded():
    template = UrlTemplate("http://h/customers/{id}?region={region}", "url_template")
    url = template.fill({"id": "a/b?c#d e", "region": "eu&x=1", "other": 1})
    assert url == "http://h/customers/a%2Fb%3Fc%23d%20e?region=eu%26x%3D1"
    assert template.fields == ["id", "region"]


def test_non_string_values_and_literal_braces():
    template = UrlTemplate("http://h/{{literal}}/{n}", "url_template")
    assert template.fill({"n": 42}) == "http://h/%7Bliteral%7D/42"  # sent exactly so


@given(st.text())
def test_any_value_round_trips_through_one_path_segment(value):
    url = UrlTemplate("http://h/x/{v}/y", "url_template").fill({"v": value})
    segment = url.removeprefix("http://h/x/").removesuffix("/y")
    assert "/" not in segment and "?" not in segment and "#" not in segment
    assert unquote(segment) == value


def test_missing_field_names_the_field_and_the_record_key():
    template = UrlTemplate("http://h/customers/{customer_id}", "url_template", "order_id")
    with pytest.raises(MissingFieldError) as caught:
        template.fill({"order_id": "o-17", "customerid": "c1"})
    message = str(caught.value)
    assert "url_template needs field 'customer_id'" in message
    assert "order_id='o-17'" in message
    assert "customerid, order_id" in message
    assert "c1" not in message  # record values stay out of the message


def test_missing_field_without_key_field_and_a_non_mapping_record():
    template = UrlTemplate("http://h/{id}", "url_template")
    with pytest.raises(MissingFieldError, match="which the record lacks"):
        template.fill({})
    with pytest.raises(MissingFieldError, match="the record is a int"):
        template.fill(7)


def test_body_template_keeps_types_of_whole_placeholders():
    template = BodyTemplate(
        {"id": "{n}", "label": "customer {n}", "nested": [{"flag": "{f}"}, 3], "lit": "{{x}}"},
        "body_template",
    )
    assert template.fields == ["n", "n", "f"]
    body = template.fill({"n": 7, "f": True})
    assert body == {"id": 7, "label": "customer 7", "nested": [{"flag": True}, 3], "lit": "{x}"}
    with pytest.raises(MissingFieldError, match="body_template needs field 'f'"):
        template.fill({"n": 7})


def test_a_null_field_is_json_null_in_a_body():
    """A lone placeholder keeps the null; inside text it is spelled as JSON spells it."""
    template = BodyTemplate({"unit": "{unit}", "line": "{street}, unit {unit}"}, "body_template")
    body = template.fill({"unit": None, "street": "Main St"})
    assert body == {"unit": None, "line": "Main St, unit null"}
    assert json.dumps(body) == '{"unit": null, "line": "Main St, unit null"}'
    assert template.fill({"unit": False, "street": "x"})["line"] == "x, unit false"


def test_invalid_templates():
    with pytest.raises(TemplateError, match="url_template"):
        UrlTemplate("http://h/{a.b}", "url_template")
    with pytest.raises(TemplateError, match="format spec"):
        BodyTemplate({"x": "{a:05d}"}, "body_template")


def test_a_placeholder_asked_as_text_is_text_alone_too_and_a_list_is_refused():
    template = BodyTemplate({"alone": "{n!s}", "in": "n={n!s}", "typed": "{n}"}, "body_template")
    assert template.fill({"n": 7}) == {"alone": "7", "in": "n=7", "typed": 7}
    assert template.fill({"n": None})["alone"] == "null"
    for value in ([{"type": "image_url"}], {"file_id": "f"}, [("k", "v")], b"\x00"):
        with pytest.raises(FieldValueError, match="needs field 'n' as text") as caught:
            template.fill({"n": value, "id": "k1"})
        assert "file_id" not in str(caught.value)  # the record's values stay out
    with pytest.raises(TemplateError, match="other than !s"):
        BodyTemplate({"x": "{a!r}"}, "body_template")


def test_a_body_never_carries_nan_and_names_the_field_that_would():
    template = BodyTemplate({"score": "{score}", "line": "s={score}"}, "body_template", "id")
    assert template.encode({"score": 1.5}) == '{"score":1.5,"line":"s=1.5"}'
    for value in (float("nan"), float("-inf"), [1.0, float("inf")], {"x": float("nan")}):
        with pytest.raises(FieldValueError, match="field 'score' of record id='k1' holds NaN"):
            template.encode({"score": value, "id": "k1"})

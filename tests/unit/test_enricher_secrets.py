"""Token sources: environment or file; the value never shows in reprs or errors."""

import pickle
import re

import pytest

from spark_jobs.enrichers import Secret, SecretError, read_token
from spark_jobs.enrichers.secrets import check_secret_variables, read_env_secret, secret_variables

TOKEN = "tok-3f9a1c-very-secret"


def test_token_from_env_and_file(tmp_path, monkeypatch):
    monkeypatch.setenv("API_TOKEN", f"  {TOKEN}\n")
    assert read_token("API_TOKEN", None).reveal() == TOKEN
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    assert read_token(None, str(path)).reveal() == TOKEN
    assert read_token(None, None) is None


def test_missing_sources_name_the_source_only(tmp_path, monkeypatch):
    monkeypatch.delenv("NO_SUCH_TOKEN", raising=False)
    with pytest.raises(SecretError, match="token_env: environment variable NO_SUCH_TOKEN"):
        read_token("NO_SUCH_TOKEN", None)
    with pytest.raises(SecretError, match="token_file: cannot read"):
        read_token(None, str(tmp_path / "absent"))
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(SecretError, match="is empty"):
        read_token(None, str(empty))


def test_secret_hides_itself():
    secret = Secret(TOKEN)
    for text in (repr(secret), str(secret), f"{secret}", repr([secret])):
        assert TOKEN not in text
    assert secret.redact(f"server said: Bearer {TOKEN}!") == "server said: Bearer ***!"
    assert secret.redact("nothing here") == "nothing here"
    with pytest.raises(TypeError, match="not picklable"):
        pickle.dumps(secret)
    with pytest.raises(SecretError):
        Secret("")


def test_a_missing_secret_header_variable_names_its_own_option(monkeypatch):
    monkeypatch.delenv("CRM_KEY", raising=False)
    with pytest.raises(SecretError) as caught:
        read_env_secret("CRM_KEY", "secret_headers.X-Api-Key")
    assert str(caught.value) == (
        "secret_headers.X-Api-Key: environment variable CRM_KEY is not set or empty"
    )


def test_the_driver_check_names_every_variable_the_config_reads(monkeypatch):
    monkeypatch.setenv("API_TOKEN", TOKEN)
    monkeypatch.delenv("CRM_KEY", raising=False)
    names = secret_variables("API_TOKEN", {"X-Api-Key": "CRM_KEY"})
    assert names == [("token_env", "API_TOKEN"), ("secret_headers.X-Api-Key", "CRM_KEY")]
    expected = "secret_headers.X-Api-Key: environment variable CRM_KEY is not set"
    with pytest.raises(SecretError, match=f"^{re.escape(expected)}$"):
        check_secret_variables(names, lambda variable: False)
    check_secret_variables(names, lambda variable: variable == "CRM_KEY")  # e.g. Spark conf


def test_secret_redacts_its_escaped_encoded_and_cut_forms_but_not_ordinary_text():
    secret = Secret('k/y+1"é=x')
    echoed = [
        '{"error": "bad key k\\/y+1\\"\\u00e9=x"}',  # JSON, slash escaped, ASCII only
        "?key=k%2Fy%2B1%22%C3%A9%3Dx&x=1",  # quote
        "?key=k%2fy%2b1%22%c3%a9%3dx",  # lower-case hex
        "?key=k/y%2B1%22%C3%A9%3Dx",  # quote_plus keeping "/"
        "Basic " + "ay95KzEiw6k9eA==",  # base64 of the value
        "ay95KzEiw6k9eA",  # unpadded
        'snippet cut at k/y+1"',  # the start, six characters or more
    ]
    for text in echoed:
        assert "***" in secret.redact(text), text
    assert secret.redact("k/y a short start stays") == "k/y a short start stays"

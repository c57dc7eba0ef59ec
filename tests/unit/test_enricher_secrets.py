"""Token sources: environment or file; the value never shows in reprs or errors."""

import pickle

import pytest

from spark_jobs.enrichers import Secret, SecretError, read_token

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

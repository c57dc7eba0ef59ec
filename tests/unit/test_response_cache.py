"""The response cache across runs, on a real local filesystem: what one run stores the next
one finds, until the TTL; corrupt files or rows are skipped, never served."""

from __future__ import annotations

import dataclasses
import hashlib

import pyarrow.parquet as pq
import pytest
from fsspec.implementations.local import LocalFileSystem

from spark_jobs.enrichers.secrets import Secret, SecretError
from spark_jobs.partition_runner import response_cache
from spark_jobs.partition_runner.cache_scope import scope_of, signing_key
from spark_jobs.partition_runner.response_cache import (
    DEFAULT_MAX_ENTRY_BYTES,
    MERGE_AFTER_FILES,
    ResponseCache,
)

URL = "http://api/customers/c1"
SCOPE = scope_of(b"k" * 32, {}, [("Authorization", Secret("token-a"))])


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def cache(tmp_path, clock, partition=0, ttl_s=3600.0, scope=SCOPE, **kwargs) -> ResponseCache:
    made = ResponseCache(
        str(tmp_path),
        partition=partition,
        partitions=4,
        ttl_s=ttl_s,
        scope=scope,
        clock=clock,
        **kwargs,
    )
    made.load()
    return made


def test_an_answer_stored_by_one_run_is_found_by_the_next(tmp_path):
    clock = Clock()
    first = cache(tmp_path, clock)
    assert first.get("GET", URL, None) is None
    first.put("GET", URL, None, b'{"name": "Ada"}')
    first.flush()
    second = cache(tmp_path, clock)
    assert second.get("GET", URL, None) == b'{"name": "Ada"}'
    assert second.get("POST", URL, '{"x":1}') is None  # another request, another key
    assert cache(tmp_path, clock, partition=1).get("GET", URL, None) is None  # its own part


def test_expired_answers_are_ignored_and_their_files_removed(tmp_path):
    clock = Clock()
    first = cache(tmp_path, clock, ttl_s=60)
    first.put("GET", URL, None, b"{}")
    first.flush()
    clock.now += 61
    later = cache(tmp_path, clock, ttl_s=60)
    assert later.get("GET", URL, None) is None
    assert later.expired_files_deleted == 1
    assert not list(tmp_path.rglob("*.parquet"))


def test_a_corrupt_file_or_row_is_skipped_never_served(tmp_path):
    clock = Clock()
    first = cache(tmp_path, clock)
    first.put("GET", URL, None, b'{"name": "Ada"}')
    first.put("GET", URL + "2", None, b'{"name": "Bob"}')
    first.flush()
    [path] = tmp_path.rglob("*.parquet")
    table = pq.read_table(path)
    payloads = table.column("payload").to_pylist()
    payloads[0] = b'{"name": "Eve"}'  # a changed value whose check no longer matches
    pq.write_table(table.set_column(2, "payload", [payloads]), path)
    second = cache(tmp_path, clock)
    assert second.get("GET", URL, None) is None
    assert second.get("GET", URL + "2", None) == b'{"name": "Bob"}'
    assert second.skipped_corrupt == 1
    path.write_bytes(path.read_bytes()[:40])  # torn file
    third = cache(tmp_path, clock)
    assert third.get("GET", URL + "2", None) is None and third.skipped_corrupt == 1


def test_oversized_answers_are_not_kept(tmp_path):
    clock = Clock()
    first = cache(tmp_path, clock, max_entry_bytes=10)
    first.put("GET", URL, None, b"x" * 11)
    first.flush()
    assert not list(tmp_path.rglob("*.parquet"))


def test_ttl_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="ttl"):
        ResponseCache(str(tmp_path), partition=0, partitions=1, ttl_s=0, scope=SCOPE)
    with pytest.raises(ValueError, match="finite"):
        ResponseCache(str(tmp_path), partition=0, partitions=1, ttl_s=float("inf"), scope=SCOPE)


def test_taken_answers_leave_memory_and_each_take_is_written_as_its_own_file(tmp_path):
    clock = Clock()
    first = cache(tmp_path, clock)
    first.put("GET", URL, None, b'{"name": "Ada"}')
    first.put("GET", URL + "2", None, b'{"name": "Bob"}')
    assert first.held == 2 and first.get("GET", URL, None) == b'{"name": "Ada"}'
    at_first_cut = first.take()
    assert first.held == 0
    assert first.get("GET", URL, None) is None  # no longer in memory: the LRU's job now
    first.put("GET", URL + "3", None, b'{"name": "Cy"}')
    first.write(at_first_cut)
    first.flush()  # the end: what no cut took
    assert first.held == 0 and first.most_held == 2
    assert (first.stored, first.files_written) == (3, 2)
    assert sorted(pq.read_metadata(p).num_rows for p in tmp_path.rglob("*.parquet")) == [1, 2]
    second = cache(tmp_path, clock)
    assert [second.get("GET", URL + s, None) for s in ("", "2", "3")] == [
        b'{"name": "Ada"}',
        b'{"name": "Bob"}',
        b'{"name": "Cy"}',
    ]


def test_an_empty_take_writes_no_file_and_a_failed_write_only_warns(tmp_path, caplog):
    clock = Clock()
    made = cache(tmp_path, clock)
    made.write(made.take())
    assert not list(tmp_path.rglob("*.parquet"))
    made.put("GET", URL, None, b"{}")
    answers = made.take()
    (tmp_path / SCOPE.name).mkdir()
    (tmp_path / SCOPE.name / "partitions=4").write_text("")  # a file where a folder should be
    made.keep(answers)
    assert "response cache: could not write" in caplog.text
    assert made.files_written == 0


def test_a_load_that_finds_many_files_merges_the_live_entries_into_one(tmp_path):
    clock = Clock()
    start, files, expired = clock.now, MERGE_AFTER_FILES + 8, 4
    writer = cache(tmp_path, clock, ttl_s=100)
    for n in range(files):  # one file per cut, as a long run writes them
        clock.now = start + n
        writer.put("GET", f"{URL}/{n}", None, f'{{"n": {n}}}'.encode())
        writer.write(writer.take())
    assert len(list(tmp_path.rglob("*.parquet"))) == files
    clock.now = start + 100 + expired - 1  # the entries 0 to 3 have expired
    merging = cache(tmp_path, clock, ttl_s=100)
    [merged] = tmp_path.rglob("*.parquet")
    assert pq.read_metadata(merged).num_rows == files - expired
    after = cache(tmp_path, clock, ttl_s=100)
    for reader in (merging, after):
        assert reader.get("GET", f"{URL}/{expired - 1}", None) is None
        assert [reader.get("GET", f"{URL}/{n}", None) for n in (expired, files - 1)] == [
            f'{{"n": {expired}}}'.encode(),
            f'{{"n": {files - 1}}}'.encode(),
        ]


def test_a_few_files_are_left_as_they_are(tmp_path):
    clock = Clock()
    writer = cache(tmp_path, clock)
    for n in range(3):
        writer.put("GET", f"{URL}/{n}", None, b"{}")
        writer.write(writer.take())
    cache(tmp_path, clock)
    assert len(list(tmp_path.rglob("*.parquet"))) == 3


def rewrite(path, **columns) -> None:
    """Replace columns of a cache file, as whoever can write the cache directory could."""
    table = pq.read_table(path)
    for name, values in columns.items():
        table = table.set_column(table.schema.get_field_index(name), name, [values])
    pq.write_table(table, path)


def one_file(tmp_path, clock, payload=b'{"name": "Ada"}'):
    first = cache(tmp_path, clock)
    first.put("GET", URL, None, payload)
    first.flush()
    [path] = tmp_path.rglob("*.parquet")
    return path


def test_an_entry_with_the_old_unkeyed_check_or_another_key_is_never_served(tmp_path):
    """The check once was an unkeyed sha256 anyone could compute: a forged answer with a
    matching check was served. Now it is an HMAC under the deployment's key."""
    clock = Clock()
    path = one_file(tmp_path, clock)
    key = pq.read_table(path).column("key")[0].as_py()
    forged, at = b'{"name": "Mallory"}', clock.now
    unkeyed = hashlib.sha256(f"{key}\n{at!r}\n".encode() + forged).hexdigest()[:32]
    rewrite(path, payload=[forged], check=[unkeyed])
    assert cache(tmp_path, clock).get("GET", URL, None) is None
    other_key = scope_of(b"another deployment", {}, [("Authorization", Secret("token-a"))])
    signed_elsewhere = dataclasses.replace(other_key, name=SCOPE.name)
    rewrite(path, check=[signed_elsewhere.sign(key.encode(), repr(at).encode(), forged)])
    reader = cache(tmp_path, clock)
    assert reader.get("GET", URL, None) is None and reader.skipped_corrupt == 1
    rewrite(path, check=["é" * 64])  # not even ASCII
    assert cache(tmp_path, clock).skipped_corrupt == 1


def test_an_entry_stored_in_the_future_is_refused_even_when_signed(tmp_path):
    """A file written with ``stored_at`` ten years ahead won over the real entry and never
    expired: the key's holder (a run) never writes one, so it is refused."""
    clock = Clock()
    path = one_file(tmp_path, clock)
    key = pq.read_table(path).column("key")[0].as_py()
    ahead = clock.now + 10 * 365 * 86400
    check = SCOPE.sign(key.encode(), repr(ahead).encode(), b'{"name": "Eve"}')
    rewrite(path, stored_at=[ahead], payload=[b'{"name": "Eve"}'], check=[check])
    reader = cache(tmp_path, clock)
    assert reader.get("GET", URL, None) is None and reader.skipped_corrupt == 1


def test_an_oversized_entry_is_refused_on_load_not_only_when_writing(tmp_path):
    clock = Clock()
    path = one_file(tmp_path, clock)
    key = pq.read_table(path).column("key")[0].as_py()
    big = b"x" * (DEFAULT_MAX_ENTRY_BYTES + 1)
    rewrite(path, payload=[big], check=[SCOPE.sign(key.encode(), repr(clock.now).encode(), big)])
    reader = cache(tmp_path, clock)
    assert reader.get("GET", URL, None) is None and reader.skipped_corrupt == 1


def test_files_over_the_size_limit_are_skipped_before_their_rows_are_read(
    tmp_path, monkeypatch, caplog
):
    clock = Clock()
    path = one_file(tmp_path, clock, payload=b"0" * 200_000)  # compresses to a few KB
    assert path.stat().st_size < 20_000
    monkeypatch.setattr(response_cache, "MAX_FILE_BYTES", 50_000)
    reader = cache(tmp_path, clock)
    assert reader.get("GET", URL, None) is None and reader.skipped_corrupt == 1
    assert "uncompressed, over 50000" in caplog.text  # the Parquet footer said so
    monkeypatch.setattr(response_cache, "MAX_FILE_BYTES", 1_000)
    read = []
    monkeypatch.setattr(LocalFileSystem, "cat_file", lambda *a, **k: read.append(a))
    assert cache(tmp_path, clock).skipped_corrupt == 1
    assert not read, "a file larger than the limit was read"
    assert f"{path.stat().st_size} bytes, over 1000" in caplog.text


def scoped(tmp_path, clock, scope, ttl_s=3600.0) -> ResponseCache:
    return cache(tmp_path, clock, ttl_s=ttl_s, scope=scope)


def test_other_credentials_or_headers_get_their_own_answers(tmp_path):
    clock = Clock()
    key = b"k" * 32
    tenant_b = scope_of(key, {}, [("Authorization", Secret("token-b"))])
    other_header = scope_of(key, {"X-Tenant": "b"}, [("Authorization", Secret("token-a"))])
    assert len({SCOPE.name, tenant_b.name, other_header.name}) == 3
    assert scope_of(key, {}, [("Authorization", Secret("token-a"))]).name == SCOPE.name
    writer = scoped(tmp_path, clock, SCOPE)
    writer.put("GET", URL, None, b'{"name": "for token a"}')
    writer.flush()
    assert scoped(tmp_path, clock, tenant_b).get("GET", URL, None) is None
    assert scoped(tmp_path, clock, other_header).get("GET", URL, None) is None
    assert scoped(tmp_path, clock, SCOPE).get("GET", URL, None) == b'{"name": "for token a"}'
    names = [p.name for p in tmp_path.iterdir()]
    assert names == [SCOPE.name] and "token-a" not in str(list(tmp_path.rglob("*")))


def test_a_short_ttl_deletes_only_expired_files_of_its_own_scope(tmp_path):
    """A run with a short --cache-ttl once deleted every other job's files."""
    clock = Clock()
    other = scope_of(b"k" * 32, {}, [("Authorization", Secret("token-b"))])
    for scope in (SCOPE, other):
        writer = scoped(tmp_path, clock, scope)
        writer.put("GET", URL, None, b"{}")
        writer.flush()
    clock.now += 600
    short = scoped(tmp_path, clock, SCOPE, ttl_s=60)
    assert short.expired_files_deleted == 1
    assert not list((tmp_path / SCOPE.name).rglob("*.parquet"))
    assert len(list((tmp_path / other.name).rglob("*.parquet"))) == 1
    assert scoped(tmp_path, clock, other).get("GET", URL, None) == b"{}"


def test_without_a_key_or_a_secret_the_cache_is_refused(monkeypatch):
    monkeypatch.delenv("NO_SUCH_CACHE_KEY", raising=False)
    with pytest.raises(SecretError, match="cache_key_env: environment variable NO_SUCH_CACHE_KEY"):
        signing_key("NO_SUCH_CACHE_KEY", [])
    derived = signing_key("NO_SUCH_CACHE_KEY", [("Authorization", Secret("token-a"))])
    monkeypatch.setenv("NO_SUCH_CACHE_KEY", "a random key")
    assert signing_key("NO_SUCH_CACHE_KEY", []) not in (derived, b"a random key")
    assert "a random key" not in repr(scope_of(signing_key("NO_SUCH_CACHE_KEY", []), {}, []))


def test_many_answers_are_written_in_files_a_reader_accepts(tmp_path, monkeypatch):
    """A busy cut or a merge could otherwise write a file over the size its reader takes."""
    monkeypatch.setattr(response_cache, "MAX_FILE_BYTES", 8_000)
    clock = Clock()
    writer = cache(tmp_path, clock)
    for n in range(8):
        writer.put("GET", f"{URL}/{n}", None, bytes([65 + n]) * 1_000)
    writer.flush()
    files = list(tmp_path.rglob("*.parquet"))
    assert writer.files_written == len(files) > 1
    reader = cache(tmp_path, clock)
    assert reader.skipped_corrupt == 0
    assert [reader.get("GET", f"{URL}/{n}", None) for n in range(8)] == [
        bytes([65 + n]) * 1_000 for n in range(8)
    ]

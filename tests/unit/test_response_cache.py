"""The response cache across runs, on a real local filesystem: what one run stores the next
one finds, until the TTL; corrupt files or rows are skipped, never served."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from spark_jobs.response_cache import MERGE_AFTER_FILES, ResponseCache

URL = "http://api/customers/c1"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def cache(tmp_path, clock, partition=0, ttl_s=3600.0, **kwargs) -> ResponseCache:
    made = ResponseCache(
        str(tmp_path), partition=partition, partitions=4, ttl_s=ttl_s, clock=clock, **kwargs
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
        ResponseCache(str(tmp_path), partition=0, partitions=1, ttl_s=0)


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
    (tmp_path / "partitions=4").write_text("")  # a file where its folder should be
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

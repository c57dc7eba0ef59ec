"""Publishing without copying, on a real local directory: a run's records stay in its own
folder, ``_SUMMARY.json`` written last names it, readers find it through that summary and
never see a mix, older runs go after the switch, and a fenced-off run switches nothing."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs.driver.current_result import (
    NoDataError,
    ResultPathError,
    current_data_path,
    current_dead_letters_path,
    read_result,
)
from spark_jobs.driver.publish import discard, publish, rejected_for, set_aside, staging_for
from spark_jobs.records.summary import JobSummary
from spark_jobs.snapshots import LeaseError, NamespaceKey, SnapshotStore


def always() -> bool:
    return True


def write_run(output: Path, run_id: str, rows: int, files: int = 3) -> str:
    """What a run's Spark write leaves in its folder: several Parquet files per kind."""
    staging = staging_for(str(output), run_id)
    for kind, count in (("data", rows), ("dead_letters", 1)):
        folder = Path(staging) / kind
        folder.mkdir(parents=True)
        ids = list(range(count))
        for part in range(files):
            chunk = ids[part::files]
            table = pa.table({"id": chunk, "run": [run_id] * len(chunk)})
            pq.write_table(table, folder / f"part-{part:05d}.parquet")
        (folder / "_SUCCESS").touch()
    return staging


def token(output: Path) -> str:
    return next((output / "runs").iterdir()).name.rsplit("-", 1)[1]


def summary(run_id: str, rows: int, **extra) -> JobSummary:
    document = {"run_id": run_id, "records_in": rows + 1, "enriched": rows, "dead_letters": 1}
    return JobSummary.from_json({**document, **extra})


def run(output: Path, run_id: str, rows: int = 10) -> None:
    """A run that writes and publishes, as the job does (discarding what is unnamed)."""
    staging = write_run(output, run_id, rows)
    try:
        publish(staging, str(output), summary(run_id, rows), always)
    finally:
        discard(staging)


def runs(output: Path) -> list[str]:
    """The run ids whose folders are left (a folder is ``<run id>-<token>``)."""
    return sorted(p.name.rsplit("-", 1)[0] for p in (output / "runs").iterdir())


def test_publish_names_the_run_in_the_summary_and_readers_find_it_there(tmp_path):
    out = tmp_path / "out"
    run(out, "first", rows=12)
    written = json.loads((out / "_SUMMARY.json").read_text())
    result = f"runs/{runs(out)[0]}-{token(out)}"
    assert written == {**summary("first", 12).to_json(), "result": result}
    assert sorted(p.name for p in out.iterdir()) == ["_SUMMARY.json", "runs"]
    data = pq.read_table(current_data_path(str(out)))
    assert sorted(data.column("id").to_pylist()) == list(range(12))
    assert pq.read_table(current_dead_letters_path(str(out))).num_rows == 1
    pandas = pytest.importorskip("pandas")
    assert len(pandas.read_parquet(current_data_path(str(out)))) == 12


def test_old_runs_go_after_the_switch_but_the_one_just_replaced_stays_for_its_readers(
    tmp_path,
):
    out = tmp_path / "out"
    run(out, "a")
    run(out, "b")
    assert runs(out) == ["a", "b"]
    write_run(out, "crashed", 5)  # written, then the driver died before switching
    run(out, "c", rows=7)
    assert runs(out) == ["b", "c"], "a and the crashed run's folder are removed"
    assert read_result(str(out)).summary["run_id"] == "c"
    assert pq.read_table(current_data_path(str(out))).num_rows == 7


def test_a_crash_before_the_switch_leaves_the_previous_result_and_the_rerun_publishes(
    tmp_path,
):
    out = tmp_path / "out"
    run(out, "a", rows=4)
    write_run(out, "b", 9)  # the crash: data written, summary never switched
    current = read_result(str(out))
    assert current.summary["run_id"] == "a"
    assert set(pq.read_table(current.data).column("run").to_pylist()) == {"a"}
    assert pq.read_table(current.data).num_rows == 4
    run(out, "b-rerun", rows=9)
    assert read_result(str(out)).summary["run_id"] == "b-rerun"
    assert runs(out) == ["a", "b-rerun"]


def test_a_run_fenced_off_before_publishing_cannot_switch_the_output(tmp_path):
    key = NamespaceKey("d", "t", "2026-11-20T00:00:00+00:00")
    store = SnapshotStore(str(tmp_path / "snapshots"))
    out = tmp_path / "out"
    run(out, "earlier")
    zombie = store.lease(key, "zombie", ttl_s=0.05)
    zombie.acquire(0)
    successor = store.lease(key, "successor")
    successor.acquire(30, poll_s=0.02)  # takes over once the zombie's lease expired
    staging = write_run(out, "zombie", 3)
    with pytest.raises(LeaseError, match="fenced off"):
        publish(staging, str(out), summary("zombie", 3), zombie.holds)
    discard(staging)
    assert read_result(str(out)).summary["run_id"] == "earlier"
    assert runs(out) == ["earlier"], "the zombie's folder is gone"
    staging = write_run(out, "successor", 5)
    publish(staging, str(out), summary("successor", 5), successor.holds)
    assert read_result(str(out)).summary["run_id"] == "successor"


def test_a_run_stopped_by_its_budget_publishes_its_summary_and_no_records(tmp_path):
    out = tmp_path / "out"
    staging = write_run(out, "partial", 3)
    publish(staging, str(out), summary("partial", 3, budget_exhausted=True), always)
    discard(staging)
    result = read_result(str(out))
    assert result.summary["budget_exhausted"] is True and result.folder is None
    with pytest.raises(NoDataError, match="run partial published no records"):
        current_data_path(str(out))
    assert not (out / "runs").exists(), "partial output is not kept"


def test_a_rejected_result_is_named_beside_the_output_until_the_next_publish(tmp_path):
    out = tmp_path / "out"
    run(out, "good")
    for rejected_run in ("bad", "worse"):
        staging = write_run(out, rejected_run, 6)
        set_aside(staging, str(out), summary(rejected_run, 6, failed="ceiling"))
        discard(staging)  # the job's finally: a folder a summary names stays
    rejected = read_result(rejected_for(str(out)))
    assert rejected.summary["run_id"] == "worse"
    assert rejected.summary["result"].startswith("../out/runs/worse-")
    assert pq.read_table(rejected.dead_letters).column("run").to_pylist() == ["worse"]
    assert read_result(str(out)).summary["run_id"] == "good", "the output is unchanged"
    assert runs(out) == ["good", "worse"], "the older rejected run is gone"
    run(out, "fixed")
    assert not Path(rejected_for(str(out))).exists(), "superseded by the published output"
    assert runs(out) == ["fixed", "good"]


def test_a_run_that_publishes_nothing_leaves_no_output_behind(tmp_path):
    out = tmp_path / "out"
    discard(write_run(out, "failed", 3))
    assert not out.exists()
    with pytest.raises(FileNotFoundError, match=r"no result published under .*out \(no _SUMMARY"):
        current_data_path(str(out))


def test_an_output_published_before_run_folders_is_read_then_replaced(tmp_path):
    out = tmp_path / "out"
    for kind in ("data", "dead_letters"):
        (out / kind).mkdir(parents=True)
        pq.write_table(pa.table({"id": [1, 2]}), out / kind / "part-00000.parquet")
    (out / "_SUMMARY.json").write_text(json.dumps(summary("old", 2).to_json()))
    assert pq.read_table(current_data_path(str(out))).num_rows == 2
    run(out, "new", rows=5)
    assert sorted(p.name for p in out.iterdir()) == ["_SUMMARY.json", "runs"], (
        "a reader of <output>/data now fails instead of reading a stale result"
    )
    assert pq.read_table(current_data_path(str(out))).num_rows == 5


def test_run_folders_are_safe_path_names_for_any_run_id_and_never_reused():
    airflow = "manual__2026-11-20T00:00:00+00:00.try1.ab12cd"
    folder = staging_for("s3://b/out/", airflow)
    assert folder.startswith("s3://b/out/runs/manual__2026-11-20T00_00_00_00_00.try1.ab12cd-")
    assert not set("%:+") & set(folder.removeprefix("s3://")), "Hadoop would encode them"
    assert staging_for("/out", "..").startswith("/out/runs/..-"), "never the parent itself"
    odd = staging_for("/out", "a/../b c")
    assert odd.startswith("/out/runs/a_.._b_c-") and odd.count("/") == 3
    assert staging_for("/out", "same") != staging_for("/out", "same"), "a rerun's is new"


def test_a_reader_racing_publishes_always_reads_one_whole_result(tmp_path):
    """A reader loops over the output while runs are written and published: every read is
    one run's records, all of them. The publisher waits for one read to end between two
    switches: a reader is never two publishes behind, so the run it found is still kept."""
    out = tmp_path / "out"
    count = 12
    reads: list[tuple[str, int]] = []
    failures: list[BaseException] = []
    read_done, stop = threading.Event(), threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                result = read_result(str(out))
            except FileNotFoundError:
                continue  # nothing published yet
            try:
                table = pq.read_table(result.data)
                assert set(table.column("run").to_pylist()) == {result.summary["run_id"]}
                assert table.num_rows == result.summary["enriched"]
                reads.append((result.summary["run_id"], table.num_rows))
            except BaseException as error:  # reported by the test thread
                failures.append(error)
                return
            finally:
                read_done.set()

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for number in range(count):
            staging = write_run(out, f"r{number:02d}", rows=20 + number, files=4)
            publish(staging, str(out), summary(f"r{number:02d}", 20 + number), always)
            read_done.clear()  # the read ending next lets the following one start past it
            assert read_done.wait(60), "the reader made no progress"
            if failures:
                break
        while not failures and reads[-1][0] != f"r{count - 1:02d}":
            read_done.clear()
            assert read_done.wait(60), "the reader made no progress"
    finally:
        stop.set()
        thread.join(60)
    assert not failures, failures[0]
    seen = {run_id for run_id, _ in reads}
    assert len(seen) >= 2, f"the reader saw one run only: {sorted(seen)}"
    assert runs(out) == [f"r{count - 2:02d}", f"r{count - 1:02d}"]


def plant_summary(location: Path, result: object) -> None:
    location.mkdir(parents=True, exist_ok=True)
    planted = {**summary("planted", 3).to_json(), "result": result}  # crafted: no JobSummary
    (location / "_SUMMARY.json").write_text(json.dumps(planted))


def plant_foreign_run(tmp_path: Path) -> None:
    """Rows a planted summary would have readers take for the output's."""
    for kind in ("data", "dead_letters"):
        folder = tmp_path / "elsewhere" / "runs" / "x" / kind
        folder.mkdir(parents=True)
        pq.write_table(pa.table({"id": [7]}), folder / "part-00000.parquet")


OUTSIDE = [
    "../elsewhere/runs/x",
    "../../elsewhere/runs/x",
    str(Path("/tmp/elsewhere/runs/x")),
    "runs/x/../../../elsewhere/runs/x",
    "runs/..",
    "runs/.",
    "runs/x/data",
    "runs",
    "runs/",
    "",
    "data",
    "s3://bucket/runs/x",
    "file:///tmp/runs/x",
    "runs/x\\..\\..",
    42,
    ["runs", "x"],
]


@pytest.mark.parametrize("result", OUTSIDE, ids=repr)
def test_a_summary_naming_a_folder_outside_its_output_is_refused_naming_file_and_value(
    tmp_path, result
):
    plant_foreign_run(tmp_path)
    out = tmp_path / "out"
    plant_summary(out, result)
    with pytest.raises(ResultPathError) as caught:
        read_result(str(out))
    assert str(caught.value).startswith(f"{out}/_SUMMARY.json: result {result!r} is not runs/")


@pytest.mark.parametrize(
    "result", ["../elsewhere/runs/x", "../out/runs/..", "../out/../elsewhere/runs/x", "runs/../x"]
)
def test_a_rejected_summary_may_name_only_a_run_folder_of_its_own_output(tmp_path, result):
    plant_foreign_run(tmp_path)
    rejected = tmp_path / "out.rejected"
    plant_summary(rejected, result)
    with pytest.raises(ResultPathError, match=r"or \.\./out/runs/<run folder>"):
        read_result(str(rejected))
    plant_summary(rejected, "../out/runs/good-1a2b3c4d")  # what set_aside writes
    assert read_result(str(rejected)).data == f"{tmp_path}/out/runs/good-1a2b3c4d/data"


def test_a_planted_rejected_summary_neither_protects_nor_removes_runs(tmp_path):
    """A ``result`` of ``../../..`` up to the root once made ``set_aside`` remove
    ``<output>/runs/`` whole, the published run's records included (the name it took for
    the replaced run was the root's, empty); now the planted summary is only replaced."""
    out = tmp_path / "out"
    run(out, "good")
    to_root = "/".join([".."] * len(out.parts))
    plant_summary(Path(rejected_for(str(out))), to_root)
    staging = write_run(out, "bad", 6)
    set_aside(staging, str(out), summary("bad", 6, failed="ceiling"))
    assert pq.read_table(current_data_path(str(out))).column("run").to_pylist()[0] == "good"
    assert read_result(rejected_for(str(out))).summary["run_id"] == "bad"
    assert runs(out) == ["bad", "good"]

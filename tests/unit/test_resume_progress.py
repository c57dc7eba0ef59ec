"""The resume decision and the Airflow hook's plan read a namespace's progress from its
progress record, one read whatever the number of partitions; without a usable record
they read the partitions, so a commit is never overlooked."""

import logging

from benchmarks.storage_requests import counted_requests, counting_url
from spark_jobs.driver.progress import ProgressFolder
from spark_jobs.records.job_record import JobRecord
from spark_jobs.snapshots import Manifest, SnapshotStore
from spark_jobs.snapshots.paths import NamespaceKey
from spark_jobs.snapshots.resume import decide

KEY = NamespaceKey("dag", "enrich", "2026-11-24")
JOB = JobRecord(fingerprint="fp", records_in=10)


def namespace(tmp_path, partitions: int) -> SnapshotStore:
    store = SnapshotStore(counting_url(tmp_path))
    store.write_job_record(KEY, JOB)
    for number in range(partitions):
        store.partition(KEY, number).commit(Manifest("fp", number, 1, 5, "a1", records_total=10))
    return store


def decision_cost(store: SnapshotStore) -> tuple[str, int]:
    with counted_requests() as requests:
        decision = decide(store, KEY, JOB, "auto", 10 * 40)
    assert decision.resume, decision.message
    return decision.message, sum(requests.values())


def test_the_decision_reads_the_record_not_every_partition(tmp_path):
    costs = {}
    for partitions in (4, 40):
        store = namespace(tmp_path / str(partitions), partitions)
        ProgressFolder(store, KEY, "run-1", partitions, 10 * partitions).refresh()
        message, costs[partitions] = decision_cost(store)
        assert message == "resuming epoch 1: 0 of 400 records committed, 0 in flight"
    assert costs[40] == costs[4] <= 4, costs


def test_without_a_record_or_with_a_corrupt_one_the_partitions_are_read(tmp_path, caplog):
    store = namespace(tmp_path, 3)
    message, cost = decision_cost(store)  # an older version's namespace: no record
    assert message.startswith("resuming epoch 1: ") and cost > 6
    (tmp_path / "dag" / "enrich" / "2026-11-24" / "progress.json").write_text("{not json")
    with caplog.at_level(logging.WARNING):
        message, _ = decision_cost(store)
    assert message.startswith("resuming epoch 1: ")
    assert "progress record of" in caplog.text and "unreadable" in caplog.text

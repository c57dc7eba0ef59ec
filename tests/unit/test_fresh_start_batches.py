"""A driver killed before any partition committed leaves no snapshot but the provider
batches its partitions asked for (their journal, written before each create call): the
next run of the same job starts fresh yet keeps that journal, so its partitions re-attach
to those batches rather than pay their requests twice. A changed job, or ``--resume
never``, discards it with the rest."""

import pytest

from spark_jobs.records.job_record import JobRecord
from spark_jobs.snapshots import SnapshotStore
from spark_jobs.snapshots.batch_journal import BatchJournal
from spark_jobs.snapshots.paths import NamespaceKey
from spark_jobs.snapshots.resume import decide

KEY = NamespaceKey("dag", "enrich", "2026-12-07")
JOB = JobRecord(fingerprint="fp", records_in=10)


def killed_before_its_first_commit(tmp_path) -> tuple[SnapshotStore, BatchJournal]:
    """The namespace of a run killed once its create calls were made: a job record, an
    attempt's counters and one partition's intents, no commit."""
    store = SnapshotStore(str(tmp_path))
    store.write_job_record(KEY, JOB)
    store.partition(KEY, 0).attempt_ledger().recorder(0, "a0", "run").write({}, final=False)
    journal = BatchJournal.at(str(tmp_path), store.namespace_path(KEY), 0)
    journal.record_intent(["c1", "c2"], None)
    return store, journal


def open_namespace(store: SnapshotStore, job: JobRecord, mode: str) -> bool:
    """What the driver does with the decision (``driver/job.py``); whether it resumed."""
    decision = decide(store, KEY, job, mode, 10)
    if not decision.resume:
        store.discard_snapshots(KEY, keep_batches=decision.keep_batches)
    return decision.resume


def test_the_same_job_starts_fresh_keeping_the_batches_its_killed_run_created(tmp_path):
    store, journal = killed_before_its_first_commit(tmp_path)
    assert not open_namespace(store, JOB, "auto")
    assert [i.custom_ids for i in journal.intents()] == [("c1", "c2")]
    assert store.read_job_record(KEY) is None and store.attempt_counts(KEY).records == ()


@pytest.mark.parametrize(
    ("job", "mode"), [(JobRecord(fingerprint="other", records_in=10), "auto"), (JOB, "never")]
)
def test_a_changed_job_or_resume_never_discards_them(tmp_path, job, mode):
    store, journal = killed_before_its_first_commit(tmp_path)
    assert not open_namespace(store, job, mode)
    assert journal.intents() == []

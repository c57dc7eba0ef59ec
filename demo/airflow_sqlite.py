"""SQLite settings for the embedded Airflow of ``make demo`` and the tests.

Airflow puts SQLite in WAL mode itself, so readers never block the writer; what runs out
under load is Python's default busy timeout of 5 s: with the scheduler, the dag-processor,
the api-server, task processes and CLI commands on one file, a writer can wait longer for
the lock and then fails with "database is locked". Waiting up to a minute instead keeps
every command working on a busy machine. Named by ``AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS``.
"""

BUSY_TIMEOUT_S = 60

#: For the sync engine (sqlite3) and the async one (aiosqlite): both take ``timeout``.
CONNECT_ARGS = {"timeout": BUSY_TIMEOUT_S}

"""SQLite settings for the embedded Airflow of ``make demo`` and the tests.

Airflow puts SQLite in WAL mode itself, so readers never block the writer. Two things
still fail with "database is locked" when the scheduler, the dag-processor, the
api-server, task processes and CLI commands share one file on a busy machine:

* Python's default busy timeout of 5 s: a writer waits longer than that for the lock.
  Waiting up to a minute instead keeps every command working.
* A deferred transaction that has read and then wants to write. If another process
  committed in between, SQLite refuses the upgrade at once (``SQLITE_BUSY_SNAPSHOT``)
  without waiting, whatever the timeout. ``airflow backfill create`` does exactly this
  (a savepoint, reads, then an insert per run) while the scheduler writes. Every
  transaction therefore begins ``IMMEDIATE``: it takes the write lock up front, waiting
  for it under the busy timeout, so no transaction ever has to upgrade. This is
  SQLAlchemy's documented recipe: the driver's own ``BEGIN`` is switched off
  (``isolation_level=None``) and the ``begin`` event emits ``BEGIN IMMEDIATE``.

Transactions run one at a time, which is what SQLite allows for writers anyway; on a
real deployment use PostgreSQL, as ``docker-compose.yaml`` does. Two processes keep the
driver's deferred transactions (``DEFERRED_CONNECT_ARGS``), because they hold a
transaction on one connection while they use another, which an up-front write lock
turns into a wait for the busy timeout: ``airflow db migrate`` (a lock transaction while
it creates the tables), and the api-server, whose concurrent UI requests each held the
write lock for a whole request (every page hung for a minute). Named by
``AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS`` (and ``..._ASYNC``), so Airflow imports
this module, and with it the listener, in every process before it creates an engine.
"""

from __future__ import annotations

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

BUSY_TIMEOUT_S = 60

#: For the sync engine (sqlite3) and the async one (aiosqlite): both take these.
CONNECT_ARGS = {"timeout": BUSY_TIMEOUT_S, "isolation_level": None}
#: The driver's own deferred transactions, with the long busy timeout.
DEFERRED_CONNECT_ARGS = {"timeout": BUSY_TIMEOUT_S}


@event.listens_for(Engine, "begin")
def _begin_immediate(connection: Connection) -> None:
    """Only where the driver's own ``BEGIN`` is off (``CONNECT_ARGS``)."""
    if connection.dialect.name != "sqlite":
        return
    if connection.connection.dbapi_connection.isolation_level is None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

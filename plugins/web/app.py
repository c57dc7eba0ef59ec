"""The plugin's FastAPI app: snapshot progress page and JSON API, mounted at ``/enrichment``.

Airflow mounts plugin apps without any authentication, so every route here declares
Airflow's own security dependencies (``airflow.api_fastapi.core_api.security``):

* ``requires_access_dag("GET")`` on the page, the listing and the detail; it resolves the
  user from ``Authorization: Bearer <jwt>`` or the UI's ``_token`` cookie (401 when there
  is none) and asks the auth manager about the ``dag_id`` path or query parameter (403).
* ``requires_access_dag("PUT")`` (editing the DAG) on discard, plus Airflow's
  ``action_logging`` so every discard lands in the audit log with the user's name.
* Listings show only namespaces of DAGs the auth manager lets the user read, checked per
  DAG id (with the DAG's team) through ``BaseAuthManager.filter_authorized_dag_ids``.

The snapshot root is the Airflow Variable ``enrichment_snapshot_root`` (or
``AIRFLOW_VAR_ENRICHMENT_SNAPSHOT_ROOT``), read on every request; unset means 503.
Handlers are plain ``def``: FastAPI runs them in its thread pool, so blocking storage and
metadata-database calls never stall the API server's event loop.
"""

import logging
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from urllib.parse import quote, urlencode, urlsplit

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from airflow.api_fastapi.logging.decorators import action_logging
from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from plugins.namespace import configured_snapshot_root
from plugins.web.page import render_message, render_page
from spark_jobs.asyncwait.watermark_valve import MIN_WATERMARK
from spark_jobs.defaults import SNAPSHOT_ROOT_VARIABLE
from spark_jobs.snapshots import NamespaceInfo, NamespaceKey, PartitionProgress, SnapshotStore
from spark_jobs.snapshots.resume import NamespaceProgress
from spark_jobs.summary import cost_report, job_watermark

logger = logging.getLogger(__name__)

#: Airflow's ``ResourceMethod`` (declared for type checkers only).
Method = Literal["GET", "POST", "PUT", "DELETE"]

DISCARD_EVENT = "enrichment_snapshots_discard"

app = FastAPI(
    title="Enrichment snapshots",
    description="Progress of resumable enrichment runs, from the snapshot store.",
    # No unauthenticated schema or docs pages: everything here sits behind Airflow auth.
    docs_url=None,
    redoc_url=None,
    openapi_url=None,
)

_read = Depends(requires_access_dag("GET"))
_edit = Depends(requires_access_dag("PUT"))


# --- snapshot store -------------------------------------------------------------------


def open_store() -> SnapshotStore:
    """The store named by the Variable right now; 503 when unset or unusable."""
    root = configured_snapshot_root()
    if root is None or not str(root).strip():
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            f"The snapshot store is not configured: set the Airflow Variable "
            f"{SNAPSHOT_ROOT_VARIABLE!r} (or the environment variable "
            f"AIRFLOW_VAR_{SNAPSHOT_ROOT_VARIABLE.upper()}) to its root, "
            "e.g. s3://bucket/snapshots.",
        )
    try:
        return SnapshotStore(str(root).strip())
    except (ValueError, ImportError) as exc:
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            f"The snapshot root in the Airflow Variable {SNAPSHOT_ROOT_VARIABLE!r} "
            f"is not usable: {exc}",
        ) from None


@contextmanager
def _storage_errors_as_503() -> Iterator[None]:
    """A storage failure is the API server's problem, not the caller's: 503, details logged."""
    try:
        yield
    except OSError as exc:
        logger.exception("snapshot store unavailable")
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            f"The snapshot store could not be read ({type(exc).__name__}); see the API server log.",
        ) from None


def namespace_key(dag_id: str, task_id: str, interval_start: str) -> NamespaceKey:
    try:
        return NamespaceKey(dag_id, task_id, interval_start)
    except ValueError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"No such namespace: {exc}") from None


# --- authorization --------------------------------------------------------------------

#: Most namespaces one list request (or the page) returns.
MAX_PAGE = 200


def _refuse_cross_site(request: Request) -> None:
    """A discard sent by a browser from another site (a forged form or fetch riding on the
    user's Airflow cookie) carries that site's Origin: refused. Same-origin pages and
    non-browser clients (no Origin, a bearer token) pass."""
    origin = request.headers.get("origin")
    if origin is None:
        return
    if urlsplit(origin).netloc != request.headers.get("host", ""):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "Cross-site request refused")


def authorized_dag_ids(user: BaseUser, dag_ids: Iterable[str], method: Method) -> set[str]:
    """The subset of ``dag_ids`` the auth manager allows ``method`` on for ``user``.

    Asks per DAG id with the DAG's team (the same question ``requires_access_dag`` asks).
    Snapshots of DAGs the metadata database does not know belong to no team: only users
    who may change Airflow's configuration (admins, ops) see or discard them.
    """
    from airflow.models.dag import DagModel

    wanted = set(dag_ids)
    if not wanted:
        return set()
    teams = DagModel.get_dag_id_to_team_name_mapping(sorted(wanted))
    auth_manager = get_auth_manager()
    known = _known_dag_ids(wanted)
    allowed: set[str] = set()
    if wanted - known and auth_manager.is_authorized_configuration(method="PUT", user=user):
        allowed |= wanted - known
    by_team: dict[str | None, set[str]] = defaultdict(set)
    for dag_id in known:
        by_team[teams.get(dag_id)].add(dag_id)
    for team_name, group in by_team.items():
        allowed |= auth_manager.filter_authorized_dag_ids(
            dag_ids=group, user=user, method=method, team_name=team_name
        )
    return allowed


# --- JSON shape -----------------------------------------------------------------------


def _require(user: BaseUser, dag_id: str, method: Method) -> None:
    """403 unless ``user`` may ``method`` the DAG (``requires_access_dag`` lets anyone with
    access to all DAGs through for a DAG the metadata database does not know)."""
    if dag_id not in authorized_dag_ids(user, {dag_id}, method):
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"No access to DAG {dag_id!r}")


def _known_dag_ids(dag_ids: set[str]) -> set[str]:
    """Which of ``dag_ids`` the metadata database knows."""
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return set(session.scalars(select(DagModel.dag_id).where(DagModel.dag_id.in_(dag_ids))))


def _utc(ms: int | None) -> str | None:
    if ms is None:
        return None
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return None


def _partition_json(p: PartitionProgress) -> dict[str, Any]:
    return {
        "partition": p.partition,
        "epoch": p.epoch,
        "input_offset": p.input_offset,
        "records_total": p.records_total,
        "committed_rows": p.committed_rows,
        "dead_letter_rows": p.dead_letter_rows,
        "done_rows": p.done_rows,
        "in_flight": p.in_flight,
        "watermark": p.watermark,
        "watermark_utc": _utc(p.watermark),
        "committed_at": p.committed_at.isoformat(),
        "attempt": p.attempt,
        "finished": bool(p.stats.get("finished")),
        "stats": dict(p.stats),
    }


#: The most partitions a job record may declare (the DAG's own maximum).
MAX_PARTITIONS = 4_096


def _partition_count(
    store: SnapshotStore, key: NamespaceKey, parts: list[PartitionProgress]
) -> int:
    """The job's partition count (from its job record), at least what was reported."""
    record = store.read_job_record(key) or {}
    enrichment = record.get("enrichment")
    declared = enrichment.get("partitions") if isinstance(enrichment, dict) else None
    if not isinstance(declared, int) or isinstance(declared, bool):
        declared = 0
    if not 0 <= declared <= MAX_PARTITIONS:  # the valve's cost grows with its square
        logger.warning("ignoring a job record of %s declaring %r partitions", key, declared)
        declared = 0
    return max(declared, max((p.partition + 1 for p in parts), default=0))


def _corrupt_partitions(store: SnapshotStore, key: NamespaceKey, valid: set[int]) -> list[int]:
    """Partitions with manifest files but not one valid manifest (the next run of such a
    partition starts it over)."""
    return [
        number
        for number in store.partitions(key)
        if number not in valid and store.partition(key, number).has_manifest_files()
    ]


def _links(base: str, key: NamespaceKey) -> dict[str, str]:
    path = "/".join(quote(part, safe="") for part in (key.dag_id, key.task_id, key.interval_start))
    query = urlencode(
        {"dag_id": key.dag_id, "task_id": key.task_id, "interval_start": key.interval_start},
        quote_via=quote,
    )
    return {
        "detail": f"{base}/api/namespaces/{path}",
        "discard": f"{base}/api/namespaces/{path}/discard",
        "page": f"{base}/?{query}",
    }


def namespace_json(store: SnapshotStore, info: NamespaceInfo, base: str) -> dict[str, Any]:
    parts = sorted(info.partitions, key=lambda p: p.partition)
    count = _partition_count(store, info.key, parts)
    reported = {p.partition for p in parts}
    totals_known = len(reported) == count and all(p.records_total is not None for p in parts)
    records_total = sum(p.records_total or 0 for p in parts) if totals_known and parts else None
    progress = NamespaceProgress(tuple(parts))
    watermark = job_watermark(parts, count) if count else None
    last_commit = max((p.committed_at for p in parts), default=None)
    if watermark == MIN_WATERMARK:
        watermark = None  # a running partition has not emitted a watermark yet
    return {
        "dag_id": info.key.dag_id,
        "task_id": info.key.task_id,
        "interval_start": info.key.interval_start,
        "totals": {
            "partition_count": count,
            "partitions_reported": len(reported),
            "partitions_finished": sum(1 for p in parts if p.stats.get("finished")),
            "records_total": records_total,
            "done_rows": progress.done,
            "committed_rows": sum(p.committed_rows for p in parts),
            "dead_letter_rows": sum(p.dead_letter_rows for p in parts),
            "in_flight": progress.in_flight,
            "epoch": progress.epoch,
            "watermark": watermark,
            "watermark_utc": _utc(watermark),
            "last_committed_at": last_commit.isoformat() if last_commit else None,
            "summary": progress.describe(records_total),
            "cost": cost_report(parts, None),
        },
        "corrupt_partitions": _corrupt_partitions(store, info.key, reported),
        # A run holds a live lease while it works (lease.py): without one, a partition
        # that is neither finished nor stopped by its budget was interrupted.
        "running": store.lease(info.key, owner="").live(),
        "partitions": [_partition_json(p) for p in parts],
        "links": _links(base, info.key),
    }


def _base(request: Request) -> str:
    """Absolute path this app is mounted at (``[api] base_url`` path + url_prefix)."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def _matches(
    key: NamespaceKey, dag_id: str | None, task_id: str | None, interval: str | None
) -> bool:
    return (
        (not dag_id or key.dag_id == dag_id)
        and (not task_id or key.task_id == task_id)
        and (not interval or key.interval_start == interval)
    )


def _readable_namespaces(
    request: Request,
    store: SnapshotStore,
    user: BaseUser,
    filters: tuple[str | None, str | None, str | None],
    page: tuple[int, int] = (0, MAX_PAGE),
) -> list[dict[str, Any]]:
    """JSON of the namespaces matching ``filters`` (dag, task, interval) on DAGs ``user``
    may read, ``page`` = (offset, limit) of them. Authorised from directory names first:
    only what the user may see is read, and only one page of it."""
    offset, limit = page
    with _storage_errors_as_503():
        keys = [key for key in store.namespace_keys() if _matches(key, *filters)]
        readable = authorized_dag_ids(user, {key.dag_id for key in keys}, "GET")
        visible = [key for key in keys if key.dag_id in readable][offset : offset + limit]
        return [
            namespace_json(
                store, NamespaceInfo(key, tuple(store.namespace_progress(key))), _base(request)
            )
            for key in visible
        ]


# --- routes ---------------------------------------------------------------------------


@app.get("/api/namespaces", dependencies=[_read])
def list_namespaces(
    request: Request,
    user: GetUserDep,
    dag_id: str | None = None,
    task_id: str | None = None,
    interval_start: str | None = None,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = MAX_PAGE,
) -> list[dict[str, Any]]:
    """Namespaces (task runs) of the DAGs the user may read, with per-partition progress;
    ``offset``/``limit`` page through them in a stable order."""
    filters = (dag_id, task_id, interval_start)
    return _readable_namespaces(request, open_store(), user, filters, (offset, limit))


@app.get("/api/namespaces/{dag_id}/{task_id}/{interval_start}", dependencies=[_read])
def get_namespace(
    request: Request, user: GetUserDep, dag_id: str, task_id: str, interval_start: str
) -> dict[str, Any]:
    """One namespace's progress; 404 when nothing is stored under it."""
    _require(user, dag_id, "GET")
    store = open_store()
    key = namespace_key(dag_id, task_id, interval_start)
    with _storage_errors_as_503():
        exists = bool(store.partitions(key)) or store.read_job_record(key) is not None
        if exists:
            parts = tuple(store.namespace_progress(key))
            return namespace_json(store, NamespaceInfo(key, parts), _base(request))
    raise HTTPException(status.HTTP_404_NOT_FOUND, "No snapshots stored for this namespace")


@app.post(
    "/api/namespaces/{dag_id}/{task_id}/{interval_start}/discard",
    dependencies=[_edit, Depends(action_logging(event=DISCARD_EVENT))],
)
def discard_namespace(
    request: Request, user: GetUserDep, dag_id: str, task_id: str, interval_start: str
) -> dict[str, bool]:
    """Delete every snapshot of the namespace: the task's next run starts from scratch."""
    _refuse_cross_site(request)
    _require(user, dag_id, "PUT")
    store = open_store()
    key = namespace_key(dag_id, task_id, interval_start)
    with _storage_errors_as_503():
        discarded = store.discard(key)
    logger.info(
        "user %s discarded snapshots of %s/%s/%s (existed: %s)",
        user.get_name(),
        key.dag_id,
        key.task_id,
        key.interval_start,
        discarded,
    )
    return {"discarded": discarded}


@app.get("/", response_class=HTMLResponse, dependencies=[_read])
def page(
    request: Request,
    user: GetUserDep,
    dag_id: str | None = None,
    task_id: str | None = None,
    interval_start: str | None = None,
) -> HTMLResponse:
    """The HTML page: progress per namespace, with a discard button where the user may edit."""
    filters = {"dag_id": dag_id, "task_id": task_id, "interval_start": interval_start}
    try:
        namespaces = _readable_namespaces(
            request, open_store(), user, (dag_id, task_id, interval_start)
        )
    except HTTPException as exc:
        html = render_page(
            [], filters=filters, editable_dag_ids=set(), user_name=user.get_name(), error=exc.detail
        )
        return HTMLResponse(html, status_code=exc.status_code)
    editable = authorized_dag_ids(user, {ns["dag_id"] for ns in namespaces}, "PUT")
    html = render_page(
        namespaces, filters=filters, editable_dag_ids=editable, user_name=user.get_name()
    )
    return HTMLResponse(html, headers={"Cache-Control": "no-store"})


@app.exception_handler(StarletteHTTPException)
async def _html_errors_on_page(request: Request, exc: StarletteHTTPException) -> Response:
    """401/403 on the page itself render as HTML (with a login link); the API stays JSON."""
    relative = request.scope.get("path", "").removeprefix(_base(request))
    if relative not in ("", "/"):
        return await http_exception_handler(request, exc)
    link = None
    if exc.status_code == status.HTTP_401_UNAUTHORIZED:
        try:
            link = (
                get_auth_manager().get_url_login(next_url=str(request.url)),
                "Log in to Airflow",
            )
        except Exception:  # no auth manager: keep the plain message
            logger.debug("no login URL available", exc_info=True)
    title = {401: "Not signed in", 403: "Access denied"}.get(exc.status_code, "Error")
    return HTMLResponse(
        render_message(title, str(exc.detail), link=link),
        status_code=exc.status_code,
        headers=getattr(exc, "headers", None),
    )

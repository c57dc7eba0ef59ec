"""The plugin's FastAPI app: snapshot progress page and JSON API, mounted at ``/enrichment``.

Airflow mounts plugin apps without any authentication, so every route here declares
Airflow's own security dependencies (``airflow.api_fastapi.core_api.security``):

* ``requires_access_dag("GET")`` on the page, the listing, the detail and the schema; it
  resolves the user from ``Authorization: Bearer <jwt>`` or the UI's ``_token`` cookie
  (401 when there is none) and asks the auth manager about the ``dag_id`` path or query
  parameter (403).
* ``requires_access_dag("PUT")`` (editing the DAG) on discard, plus Airflow's
  ``action_logging`` so every discard lands in the audit log with the user's name.
* Per namespace, :mod:`enrichment_airflow.web.access` asks again with the DAG's team; listings show
  only namespaces of DAGs the user may read.

The store and the namespace of a path are dependencies (:mod:`enrichment_airflow.web.deps`); the
responses are the Pydantic models of :mod:`enrichment_airflow.web.models`, documented in the app's
``/openapi.json``. Handlers are plain ``def``: FastAPI runs them in its thread pool, so
blocking storage and metadata-database calls never stall the API server's event loop.
"""

import logging
from typing import Annotated, Any

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from airflow.api_fastapi.logging.decorators import action_logging
from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from enrichment_airflow.web.access import EditableKey, ReadableKey, authorized_dag_ids
from enrichment_airflow.web.deps import StoreDep, storage_errors_as_503
from enrichment_airflow.web.models import DiscardResult, NamespaceView
from enrichment_airflow.web.page import render_message, render_page
from enrichment_airflow.web.views import MAX_PARTITIONS_PAGE, PARTITIONS_PAGE, read_namespace
from spark_jobs.snapshots import NamespaceKey

logger = logging.getLogger(__name__)

DISCARD_EVENT = "enrichment_snapshots_discard"
#: Most namespaces one list request (or the page) returns.
MAX_PAGE = 200

app = FastAPI(
    title="Enrichment snapshots",
    description="Progress of resumable enrichment runs, from the snapshot store.",
    # The schema is served below behind Airflow auth; no docs pages.
    docs_url=None,
    redoc_url=None,
    openapi_url=None,
)

_read = Depends(requires_access_dag("GET"))
_edit = Depends(requires_access_dag("PUT"))


def _base(request: Request) -> str:
    """Absolute path this app is mounted at (``[api] base_url`` path + url_prefix)."""
    return str(request.scope.get("root_path", "")).rstrip("/")


class Filters:
    """The optional ``dag_id``/``task_id``/``interval_start`` query filters."""

    def __init__(
        self,
        dag_id: str | None = None,
        task_id: str | None = None,
        interval_start: str | None = None,
    ) -> None:
        self.values = {"dag_id": dag_id, "task_id": task_id, "interval_start": interval_start}

    def match(self, key: NamespaceKey) -> bool:
        return all(not want or getattr(key, name) == want for name, want in self.values.items())


FiltersDep = Annotated[Filters, Depends()]


class PartitionPage:
    """The ``partitions_offset``/``partitions_limit`` query parameters: which page of each
    namespace's partitions to show (a namespace may have ten thousand)."""

    def __init__(
        self,
        partitions_offset: Annotated[int, Query(ge=0)] = 0,
        partitions_limit: Annotated[int, Query(ge=1, le=MAX_PARTITIONS_PAGE)] = PARTITIONS_PAGE,
    ) -> None:
        self.offset, self.limit = partitions_offset, partitions_limit


PartitionPageDep = Annotated[PartitionPage, Depends()]


def _readable_namespaces(
    request: Request,
    store: StoreDep,
    user: GetUserDep,
    filters: FiltersDep,
    page: PartitionPageDep,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = MAX_PAGE,
) -> list[NamespaceView]:
    """The namespaces matching the filters on DAGs the user may read, one page of them.
    Authorised from directory names first: only what the user may see is read."""
    with storage_errors_as_503():
        keys = [key for key in store.namespace_keys() if filters.match(key)]
        readable = authorized_dag_ids(user, {key.dag_id for key in keys}, "GET")
        visible = [key for key in keys if key.dag_id in readable][offset : offset + limit]
        views = (
            read_namespace(store, key, _base(request), page.offset, page.limit) for key in visible
        )
        return [view for view in views if view is not None]


ReadableNamespaces = Annotated[list[NamespaceView], Depends(_readable_namespaces)]


@app.get("/api/namespaces", dependencies=[_read])
def list_namespaces(namespaces: ReadableNamespaces) -> list[NamespaceView]:
    """Namespaces (task runs) of the DAGs the user may read, with per-partition progress;
    ``offset``/``limit`` page through them in a stable order."""
    return namespaces


@app.get("/api/namespaces/{dag_id}/{task_id}/{interval_start}", dependencies=[_read])
def get_namespace(
    request: Request, store: StoreDep, key: ReadableKey, page: PartitionPageDep
) -> NamespaceView:
    """One namespace's progress with one page of its partitions (``partitions_offset``,
    ``partitions_limit``); 404 when nothing is stored under it (a run that holds its lease
    but has not written its job record yet counts: the page polls it)."""
    with storage_errors_as_503():
        view = read_namespace(store, key, _base(request), page.offset, page.limit)
    if view is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "No snapshots stored for this namespace")
    return view


@app.post(
    "/api/namespaces/{dag_id}/{task_id}/{interval_start}/discard",
    dependencies=[_edit, Depends(action_logging(event=DISCARD_EVENT))],
)
def discard_namespace(user: GetUserDep, store: StoreDep, key: EditableKey) -> DiscardResult:
    """Delete every snapshot of the namespace: the task's next run starts from scratch."""
    with storage_errors_as_503():
        discarded = store.discard(key)
    logger.info(
        "user %s discarded snapshots of %s/%s/%s (existed: %s)",
        user.get_name(),
        key.dag_id,
        key.task_id,
        key.interval_start,
        discarded,
    )
    return DiscardResult(discarded=discarded)


@app.get("/", response_class=HTMLResponse, dependencies=[_read])
def page(user: GetUserDep, filters: FiltersDep, namespaces: ReadableNamespaces) -> HTMLResponse:
    """The HTML page: progress per namespace, with a discard button where the user may edit;
    it refreshes itself from the JSON API while a run is going."""
    editable = authorized_dag_ids(user, {ns.dag_id for ns in namespaces}, "PUT")
    html = render_page(
        namespaces, filters=filters.values, editable_dag_ids=editable, user_name=user.get_name()
    )
    return HTMLResponse(html, headers={"Cache-Control": "no-store"})


@app.get("/openapi.json", dependencies=[_read], include_in_schema=False)
def openapi() -> dict[str, Any]:
    """The API's schema, for signed-in users only."""
    return app.openapi()


@app.exception_handler(StarletteHTTPException)
async def _html_errors_on_page(request: Request, exc: StarletteHTTPException) -> Response:
    """Errors on the page itself render as HTML (401 with a login link); the API stays JSON."""
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

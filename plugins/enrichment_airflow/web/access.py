"""Who may see and change which namespaces: Airflow's auth manager, asked per DAG.

Airflow mounts plugin apps without any authentication, so the app's routes declare
Airflow's own security dependencies (``requires_access_dag``) and, per namespace, the
dependencies below, which ask the auth manager about the namespace's DAG with its team.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Annotated, Literal
from urllib.parse import urlsplit

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import Depends, HTTPException, Request, status

from enrichment_airflow.web.deps import KeyDep
from spark_jobs.snapshots import NamespaceKey

#: Airflow's ``ResourceMethod`` (declared for type checkers only).
Method = Literal["GET", "POST", "PUT", "DELETE"]


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


def _known_dag_ids(dag_ids: set[str]) -> set[str]:
    """Which of ``dag_ids`` the metadata database knows."""
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return set(session.scalars(select(DagModel.dag_id).where(DagModel.dag_id.in_(dag_ids))))


def _require(user: BaseUser, key: NamespaceKey, method: Method) -> NamespaceKey:
    """403 unless ``user`` may ``method`` the DAG (``requires_access_dag`` lets anyone with
    access to all DAGs through for a DAG the metadata database does not know)."""
    if key.dag_id not in authorized_dag_ids(user, {key.dag_id}, method):
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"No access to DAG {key.dag_id!r}")
    return key


def readable_key(user: GetUserDep, key: KeyDep) -> NamespaceKey:
    """The namespace of the path, once the user may read its DAG."""
    return _require(user, key, "GET")


def refuse_cross_site(request: Request) -> None:
    """A discard sent by a browser from another site (a forged form or fetch riding on the
    user's Airflow cookie) carries that site's Origin: refused. Same-origin pages and
    non-browser clients (no Origin, a bearer token) pass."""
    origin = request.headers.get("origin")
    if origin is None:
        return
    if urlsplit(origin).netloc != request.headers.get("host", ""):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "Cross-site request refused")


def editable_key(
    user: GetUserDep, key: KeyDep, _same_site: Annotated[None, Depends(refuse_cross_site)]
) -> NamespaceKey:
    """The namespace of the path, once the request is same-site and the user may edit
    its DAG."""
    return _require(user, key, "PUT")


ReadableKey = Annotated[NamespaceKey, Depends(readable_key)]
EditableKey = Annotated[NamespaceKey, Depends(editable_key)]

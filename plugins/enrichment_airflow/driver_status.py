"""The state of a cluster-mode Spark driver, asked of the cluster manager without blocking.

The deferrable operator's trigger (``enrichment_airflow.cluster_run_trigger``) waits in the
triggerer's event loop beside every other deferred task, so it asks over aiohttp, never
with the provider's blocking ``curl`` / ``spark-submit --status`` processes. One protocol,
:class:`DriverStatusClient`, so other cluster managers plug in without touching the
trigger. Implemented: Spark standalone, through the master's REST submission server
(``GET <rest>/v1/submissions/status/<driver id>``, which the Spark provider's own
tracking reads too). Not implemented: YARN (the ResourceManager's
``/ws/v1/cluster/apps/<id>``) and Kubernetes (the driver pod's phase); each would be a
class with the same two methods and an entry in :data:`_CLIENTS`.

The trigger is serialized into Airflow's database and rebuilt in the triggerer, so a
client is described by a plain :meth:`DriverStatusClient.to_spec` and rebuilt by
:func:`status_client`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    import aiohttp

#: Standalone driver states in which the driver still runs or will run again, as the
#: provider's ``_StandaloneSparkSubmitBackend.is_job_active`` counts them: RELAUNCHING
#: restarts a supervised driver, UNKNOWN is a master in failure recovery.
STANDALONE_ACTIVE = frozenset({"SUBMITTED", "RUNNING", "RELAUNCHING", "UNKNOWN"})
#: The one standalone state of a driver that exited cleanly.
STANDALONE_SUCCEEDED = "FINISHED"
#: The most of a status answer read (decompressed). The master's is a few hundred bytes;
#: the trigger shares the triggerer's memory and event loop with every deferred task, so
#: a larger or endless answer (a proxy, a hostile endpoint) is an error of that master.
MAX_STATUS_BYTES = 64 * 1024


class DriverStatusError(RuntimeError):
    """The cluster manager gave no usable answer (unreachable, or it does not know the
    driver); the trigger counts these and gives up after several in a row."""


@dataclass(frozen=True)
class DriverState:
    """A driver's state as the cluster manager names it, and what that means."""

    name: str
    active: bool
    succeeded: bool


class DriverStatusClient(Protocol):
    """Asks one cluster manager for the state of a driver it launched."""

    async def state(self, driver_id: str) -> DriverState:
        """The driver's current state; :class:`DriverStatusError` when none is known."""
        ...

    def to_spec(self) -> dict[str, Any]:
        """Plain data that :func:`status_client` turns back into this client."""
        ...


class StandaloneRestStatus:
    """A standalone master's REST status endpoint (``spark.master.rest.enabled``), tried
    on each master of an HA list in turn, as the provider does.

    :param endpoints: base URLs of the REST servers, ``http://master:6066``.
    :param timeout_s: total seconds for one answer.
    """

    kind: ClassVar[str] = "standalone"

    def __init__(self, endpoints: Sequence[str], timeout_s: float = 30.0) -> None:
        if not endpoints:
            raise ValueError("StandaloneRestStatus: no REST endpoint to ask")
        self.endpoints = [endpoint.rstrip("/") for endpoint in endpoints]
        self.timeout_s = timeout_s

    async def state(self, driver_id: str) -> DriverState:
        import aiohttp  # in the triggerer only: the DAG file imports this module at parse time

        errors = []
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for endpoint in self.endpoints:
                url = f"{endpoint}/v1/submissions/status/{driver_id}"
                try:
                    async with session.get(url) as response:
                        response.raise_for_status()
                        answer = json.loads(await _bounded_body(response.content))
                except (aiohttp.ClientError, TimeoutError, ValueError) as error:
                    errors.append(f"{endpoint}: {type(error).__name__} {error}")
                    continue
                except RecursionError:
                    errors.append(f"{endpoint}: status answer nested too deeply to parse")
                    continue
                if not isinstance(answer, dict) or not answer.get("success"):
                    message = answer.get("message") if isinstance(answer, dict) else answer
                    errors.append(f"{endpoint}: {str(message)[:200]}")
                    continue
                name = str(answer.get("driverState", "UNKNOWN")).upper()
                return DriverState(name, name in STANDALONE_ACTIVE, name == STANDALONE_SUCCEEDED)
        raise DriverStatusError(f"no state for driver {driver_id}: {'; '.join(errors)}")

    def to_spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "endpoints": list(self.endpoints), "timeout_s": self.timeout_s}


async def _bounded_body(content: aiohttp.StreamReader) -> bytes:
    """The whole body, or ``ValueError`` once it passes :data:`MAX_STATUS_BYTES`: reading
    stops there, whatever the length the server announced or did not."""
    chunks, size = [], 0
    while chunk := await content.readany():
        size += len(chunk)
        if size > MAX_STATUS_BYTES:
            raise ValueError(f"status answer larger than {MAX_STATUS_BYTES} bytes; not read")
        chunks.append(chunk)
    return b"".join(chunks)


def standalone_rest_endpoints(master: str, scheme: str = "http", port: int = 6066) -> list[str]:
    """The REST servers of ``spark://m1:7077[,m2:7077]``: each host with the REST port
    (the connection's ``rest-scheme`` and ``rest-port`` extras, as the provider reads them)."""
    if not master.startswith("spark://"):
        raise ValueError(f"not a standalone master: {master!r}")
    hosts = [part.strip().rsplit(":", 1)[0] for part in master.removeprefix("spark://").split(",")]
    return [f"{scheme}://{host}:{port}" for host in hosts if host]


_CLIENTS: dict[str, type[StandaloneRestStatus]] = {StandaloneRestStatus.kind: StandaloneRestStatus}


def status_client(spec: Mapping[str, Any]) -> DriverStatusClient:
    """The client a :meth:`DriverStatusClient.to_spec` describes."""
    kind = spec.get("kind")
    if kind not in _CLIENTS:
        raise ValueError(f"driver status: unknown cluster manager {kind!r} ({sorted(_CLIENTS)})")
    options = {name: value for name, value in spec.items() if name != "kind"}
    return _CLIENTS[kind](**options)

"""Fixtures shared by the integration tests' modules (started only when a test asks)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .connect_support import ConnectServer, connect_server


@pytest.fixture(scope="session")
def spark_connect(tmp_path_factory) -> Iterator[ConnectServer]:
    """One real Spark Connect server for the session's Connect tests (its workers lack
    this project: ``connect_support``)."""
    with connect_server(tmp_path_factory.mktemp("spark-connect")) as server:
        yield server

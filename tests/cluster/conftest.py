from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator

import pytest

from tests.traffic.conftest import fake_server  # noqa: F401  (the fixture, for the runner tests here)

from .ray_nodes import RayCluster, start_cluster


def ray_or_skip() -> None:
    if importlib.util.find_spec("ray") is None:
        if os.environ.get("SPECLAB_REQUIRE_RAY") == "1":
            pytest.fail("Ray is not installed and SPECLAB_REQUIRE_RAY=1 (pip install -e '.[ray]')")
        pytest.skip("Ray is not installed (pip install -e '.[ray]')")


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayCluster]:
    ray_or_skip()
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        import ray

        if ray.is_initialized():  # this process's connection first, so nothing reconnects to a stopped head
            ray.shutdown()
        cluster.stop()

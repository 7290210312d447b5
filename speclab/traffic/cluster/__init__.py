"""Traffic workers on a Ray cluster (``--cluster ray://ADDRESS|auto``), an optional extra.

``make_runner`` is the seam every driver calls: without ``--cluster`` it returns the local
``TrafficRunner``; with it, ``RayTrafficRunner`` (imported only then, so nothing here needs Ray
unless a cluster is asked for). ``check_cluster`` refuses a malformed address, or a cluster
asked for where Ray is not installed, as bad input before anything starts.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

from speclab.model.errors import InputError
from speclab.model.limits import auto_workers

from ..client import Target
from ..runner import TrafficRunner
from ..schedule import Plan

INSTALL_HINT = "pip install 'speclab[ray]'"


def ray_installed() -> bool:
    return importlib.util.find_spec("ray") is not None


def check_cluster(cluster: str | None) -> str | None:
    """``--cluster``'s value as given, or InputError (exit 2) naming what is wrong with it."""
    if cluster is None:
        return None
    if cluster != "auto" and not (cluster.startswith("ray://") and len(cluster) > len("ray://")):
        raise InputError(f"--cluster {cluster!r}: expected ray://HOST:PORT (Ray Client) or auto (the cluster this host is part of)")
    if not ray_installed():
        raise InputError(f"--cluster {cluster}: Ray is not installed; {INSTALL_HINT}")
    return cluster


def local_workers(workers: int | None) -> int:
    """``--workers auto`` on this host (``limits.auto_workers``)."""
    return workers if workers is not None else auto_workers()


def make_runner(
    plan: Plan, targets: Mapping[str, Target], *, cluster: str | None, workers: int | None, **kwargs: Any
) -> TrafficRunner:
    """The runner for this run: local worker processes, or Ray actors on ``cluster``
    (``workers=None``: this host's share of its cores, or one per CPU of the cluster)."""
    if cluster is None:
        return TrafficRunner(plan, dict(targets), workers=local_workers(workers), **kwargs)
    from .runner import RayTrafficRunner

    return RayTrafficRunner(plan, dict(targets), cluster=check_cluster(cluster) or cluster, workers=workers, **kwargs)

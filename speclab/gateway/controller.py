"""Set a tenant's or route's pool, set canary shares, roll back: live, through the runtime API.

The controller reads the routing HAProxy is using right now (its maps and the canary backend's
weights), checks the change against it, applies it without a reload, reads it back, and returns
the change as an :class:`Event` (who, what, when) that also goes to the sinks (the report
directory's ``events.jsonl``, a session's timeline). A rollback is one call over one connection:
the tenant and route maps are each replaced atomically (prepare/commit) with every entry on the
baseline, then the speculative servers of the canary pool go to weight 0.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from speclab.model.errors import InputError
from speclab.model.gateway import CANARY
from speclab.model.records import Event

from .config import ordered_routes
from .files import production_files_sink
from .routing import RoutingTable
from .runtime import RuntimeAPI, RuntimeAPIError
from .state import GatewayState, state_path

EventSink = Callable[[Event], None]


class GatewayController:
    def __init__(self, api: RuntimeAPI, state: GatewayState, *, clock: Callable[[], float] | None = None,
                 sinks: list[EventSink] | None = None) -> None:
        self.api = api
        self.state = state
        self._skeleton = state.table()
        self._clock = clock or (lambda: time.monotonic() - state.started_monotonic)
        self.sinks: list[EventSink] = list(sinks or [])

    @classmethod
    async def open(cls, *, socket: str | Path | None = None, report_dir: str | Path | None = None,
                   clock: Callable[[], float] | None = None, sinks: list[EventSink] | None = None,
                   write_files: bool = True, timeout: float = 5.0) -> GatewayController:
        """Attach to a running gateway by its stats socket or its report directory; with ``write_files``
        every change is appended to its ``events.jsonl`` and rewrites its production files."""
        if socket is None and report_dir is None:
            raise InputError("gateway: give the running gateway's --socket PATH or its --report DIR")
        if socket is not None and report_dir is not None:
            raise InputError("gateway: give the running gateway's --socket PATH or its --report DIR, not both")
        if report_dir is not None:
            state = GatewayState.read(state_path(Path(report_dir)))
            api = RuntimeAPI(state.socket, timeout=timeout)
            await api.connect()
        else:
            api = RuntimeAPI(str(socket), timeout=timeout)
            await api.connect()
            try:
                state = await _state_behind(api)
            except BaseException:
                await api.close()
                raise
        controller = cls(api, state, clock=clock, sinks=sinks)
        try:
            await controller.check_backends()
        except BaseException:
            await api.close()
            raise
        if write_files:
            controller.sinks += [events_file_sink(state.events_path), production_files_sink(state)]
        return controller

    async def close(self) -> None:
        await self.api.close()

    async def check_backends(self) -> None:
        have = set(await self.api.backends())
        missing = [p for p in self._skeleton.pools if p not in have]
        if missing:
            raise InputError(f"gateway: HAProxy at {self.api.socket_path} has no backend for {', '.join(missing)}; "
                             "it is not this lab's gateway")

    # -- the live routing -----------------------------------------------------------------------

    async def routing(self) -> RoutingTable:
        """What HAProxy routes by at this moment."""
        base = self._skeleton
        tenants = dict(await self.api.map_entries(self.state.tenants_map))
        routes = dict(await self.api.map_entries(self.state.routes_map))
        weights = {s.server: s.weight for s in await self.api.servers(CANARY)}
        total = sum(weights.values())
        shares = {v: (round(100 * weights.get(v, 0) / total) if total else 0) for v in base.speculative}
        return RoutingTable(variants=base.variants, baseline=base.baseline, tenant_header=base.tenant_header,
                            tenants=tenants, routes=routes, shares=shares)

    async def info(self) -> dict[str, str]:
        return await self.api.info()

    # -- changes --------------------------------------------------------------------------------

    async def set(self, key: str, pool: str, *, who: str) -> Event:
        before = await self.routing()
        after = before.with_pool(key, pool)
        kind, name = before.entry(key)
        old = before.pool_of(kind, name)
        started = time.monotonic()
        map_file = self.state.tenants_map if kind == "tenant" else self.state.routes_map
        await self.api.set_map(map_file, name, pool)
        applied = time.monotonic() - started
        await self._verify(after)
        return self._emit("route_change", f"{kind} {name}: {old} -> {pool}", who=who, before=before, after=after,
                          applied_s=applied, what={"kind": kind, "name": name, "from": old, "to": pool},
                          variant=None if pool == CANARY else pool)

    async def weight(self, shares: Mapping[str, int], *, who: str) -> Event:
        before = await self.routing()
        after = before.with_shares(shares)
        started = time.monotonic()
        await self._apply_weights(before, after)
        applied = time.monotonic() - started
        await self._verify(after)
        text = ", ".join(f"{p} {before.shares.get(p, 0)}% -> {pct}%" for p, pct in shares.items())
        return self._emit("weight_change", f"canary shares: {text}", who=who, before=before, after=after,
                          applied_s=applied, what={"shares": dict(shares), "weights": after.canary_weights()})

    async def rollback(self, *, who: str) -> Event:
        before = await self.routing()
        after = before.rolled_back()
        applied = await self._replace_all(before, after)
        moved = [f"tenant {k}" for k, v in before.tenants.items() if v != before.baseline]
        moved += [f"route {k}" for k, v in before.routes.items() if v != before.baseline]
        moved += [f"canary {p} {pct}%" for p, pct in before.shares.items() if pct]
        text = ", ".join(moved) if moved else "nothing was off the baseline"
        return self._emit("rollback", f"rollback to {before.baseline}: {text}", who=who, before=before,
                          after=after, applied_s=applied, what={"moved": moved, "to": before.baseline},
                          variant=before.baseline)

    async def restore(self, table: RoutingTable, *, who: str) -> Event:
        """Put a whole routing back (as a drill does when it ends): same tenants and routes, any pools."""
        before = await self.routing()
        if set(table.tenants) != set(before.tenants) or set(table.routes) != set(before.routes):
            raise InputError("gateway: restore: the tenants and routes must be the running gateway's own")
        after = before.with_shares(dict.fromkeys(before.speculative, 0)).with_shares(dict(table.shares))
        for kind, entries in (("tenant", table.tenants), ("route", table.routes)):
            for name, pool in entries.items():
                after = after.with_pool(f"{kind}:{name}", pool)
        applied = await self._replace_all(before, after)
        return self._emit("route_change", "routing restored", who=who, before=before, after=after, applied_s=applied,
                          what={"restored": after.to_dict()})

    async def _replace_all(self, before: RoutingTable, after: RoutingTable) -> float:
        """Each map replaced atomically, then the weights, over this one connection; seconds it took."""
        started = time.monotonic()
        await self.api.replace_map(self.state.tenants_map, sorted(after.tenants.items()))
        await self.api.replace_map(self.state.routes_map, ordered_routes(after.routes))
        await self._apply_weights(before, after)
        applied = time.monotonic() - started
        await self._verify(after)
        return applied

    async def _apply_weights(self, before: RoutingTable, after: RoutingTable) -> None:
        """Lower weights first, so the canary pool never sends more to a speculative server than either
        the old or the new shares would; raise first when lowering first would leave no weight at all."""
        old, new = before.canary_weights(), after.canary_weights()
        order = sorted(new, key=lambda v: new[v] - old.get(v, 0))
        if sum(min(old.get(v, 0), new[v]) for v in new) == 0:
            order.reverse()  # lowering first would leave the pool no server with a weight for a moment
        for variant in order:
            await self.api.set_weight(CANARY, variant, new[variant])

    async def _verify(self, expected: RoutingTable) -> None:
        now = await self.routing()
        if (dict(now.tenants), dict(now.routes), now.canary_weights()) != (
                dict(expected.tenants), dict(expected.routes), expected.canary_weights()):
            raise RuntimeAPIError(f"gateway: HAProxy's routing after the change is {now.to_dict()}, "
                                  f"expected {expected.to_dict()}")

    def _emit(self, kind: str, message: str, *, who: str, before: RoutingTable, after: RoutingTable,
              applied_s: float, what: dict[str, Any], variant: str | None = None) -> Event:
        event = Event(t=round(self._clock(), 6), kind=kind, message=f"gateway: {message} ({who})", variant=variant,
                      data={"who": who, "what": what, "when": time.time(), "applied_s": round(applied_s, 6),
                            "before": before.to_dict(), "after": after.to_dict()})
        for sink in self.sinks:
            sink(event)
        return event


def events_file_sink(path: Path) -> EventSink:
    """Append each event as one JSON line (one write, so concurrent commands do not interleave)."""

    def write(event: Event) -> None:
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(event.to_dict()) + "\n")

    return write


async def _state_behind(api: RuntimeAPI) -> GatewayState:
    """The gateway.json beside the map files HAProxy has loaded."""
    files = [m.file for m in await api.maps()]
    tenants = next((f for f in files if Path(f).name == "tenants.map"), None)
    if tenants is None:
        raise InputError(f"gateway: HAProxy at {api.socket_path} has no tenants.map loaded; "
                         "it is not a gateway speclab started")
    state = GatewayState.read(state_path(Path(tenants).parent))
    if Path(state.tenants_map) != Path(tenants):
        raise InputError(f"gateway: {state_path(Path(tenants).parent)} describes another gateway")
    return state

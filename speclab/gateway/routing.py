"""The gateway's routing as a value: tenants and routes to pools, and the canary pool's shares.

The HAProxy configuration, the Gateway API manifests and every runtime change are derived from
one :class:`RoutingTable`, so the three cannot disagree. Changes return a new table and refuse
what the running gateway could not carry out (an unknown tenant, route or pool, a share outside
0-100); ``rolled_back`` is the table a rollback leaves: every entry on the baseline, the canary
pool all baseline.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from speclab.model.errors import InputError
from speclab.model.gateway import CANARY, DEFAULT_TENANT_HEADER, HEADER_RE, TENANT_RE, route_problem
from speclab.model.lab import Lab

Kind = Literal["tenant", "route"]


@dataclass(frozen=True)
class RoutingTable:
    variants: tuple[str, ...]  # one backend each, in the lab's order
    baseline: str
    tenant_header: str = DEFAULT_TENANT_HEADER
    tenants: Mapping[str, str] = field(default_factory=dict)
    routes: Mapping[str, str] = field(default_factory=dict)
    shares: Mapping[str, int] = field(default_factory=dict)  # speculative variant -> % of the canary pool

    @classmethod
    def from_lab(
        cls,
        lab: Lab,
        *,
        variants: tuple[str, ...] | None = None,
        tenants: Mapping[str, str] | None = None,
        routes: Mapping[str, str] | None = None,
        shares: Mapping[str, int] | None = None,
        tenant_header: str | None = None,
    ) -> RoutingTable:
        """The lab's `[gateway]` section with command-line additions (which win on the same name)."""
        section = lab.gateway
        names = variants or lab.variant_names
        if lab.baseline not in names:
            raise InputError(f"gateway: the baseline {lab.baseline!r} must be one of the variants served")
        table = cls(
            variants=tuple(names),
            baseline=lab.baseline,
            tenant_header=tenant_header or section.tenant_header,
            tenants={**section.tenants, **(tenants or {})},
            routes={**section.routes, **(routes or {})},
            shares={**section.weights, **(shares or {})},
        )
        table.check()
        return table

    # -- queries --------------------------------------------------------------------------------

    @property
    def pools(self) -> tuple[str, ...]:
        return (*self.variants, CANARY)

    @property
    def speculative(self) -> tuple[str, ...]:
        return tuple(v for v in self.variants if v != self.baseline)

    def canary_weights(self) -> dict[str, int]:
        """Server weights of the canary backend: each share, and the remainder on the baseline."""
        out = {v: int(self.shares.get(v, 0)) for v in self.speculative}
        out[self.baseline] = 100 - sum(out.values())
        return {v: out[v] for v in self.variants}

    def entry(self, key: str) -> tuple[Kind, str]:
        """``tenant:A``, ``route:/v1/completions`` or a bare name known as exactly one of them."""
        kind, sep, name = key.partition(":")
        if sep and kind in ("tenant", "route"):
            which: Kind = "tenant" if kind == "tenant" else "route"
            if name not in (self.tenants if which == "tenant" else self.routes):
                raise InputError(f"gateway: unknown {which} {name!r} ({self._known(which)})")
            return which, name
        in_tenants, in_routes = key in self.tenants, key in self.routes
        if in_tenants and in_routes:
            raise InputError(f"gateway: {key!r} is both a tenant and a route; write tenant:{key} or route:{key}")
        if in_tenants:
            return "tenant", key
        if in_routes:
            return "route", key
        raise InputError(f"gateway: unknown tenant or route {key!r} ({self._known('tenant')}; {self._known('route')})")

    def _known(self, kind: Kind) -> str:
        names = sorted(self.tenants if kind == "tenant" else self.routes)
        return f"{kind}s: {', '.join(names)}" if names else f"no {kind}s configured"

    def pool_of(self, kind: Kind, name: str) -> str:
        return (self.tenants if kind == "tenant" else self.routes)[name]

    # -- changes --------------------------------------------------------------------------------

    def with_pool(self, key: str, pool: str) -> RoutingTable:
        kind, name = self.entry(key)
        self._check_pool(pool)
        if kind == "tenant":
            return replace(self, tenants={**self.tenants, name: pool})
        return replace(self, routes={**self.routes, name: pool})

    def with_shares(self, shares: Mapping[str, int]) -> RoutingTable:
        for pool, pct in shares.items():
            self._check_share(pool, pct)
        merged = {**self.shares, **shares}
        total = sum(merged.values())
        if total > 100:
            raise InputError(f"gateway: the speculative shares would add up to {total}%, more than 100%")
        return replace(self, shares=merged)

    def rolled_back(self) -> RoutingTable:
        return replace(
            self,
            tenants=dict.fromkeys(self.tenants, self.baseline),
            routes=dict.fromkeys(self.routes, self.baseline),
            shares=dict.fromkeys(self.speculative, 0),
        )

    # -- checks ---------------------------------------------------------------------------------

    def check(self) -> None:
        if CANARY in self.variants:
            raise InputError(f"gateway: {CANARY!r} names the weighted pool; a variant cannot be called that")
        if not HEADER_RE.match(self.tenant_header):
            raise InputError(f"gateway: --tenant-header: expected an HTTP header name, got {self.tenant_header!r}")
        for name, pool in self.tenants.items():
            if not TENANT_RE.match(name):
                raise InputError(f"gateway: tenant {name!r}: 1-63 letters, digits, '.', '_' or '-'")
            self._check_pool(pool)
        for key, pool in self.routes.items():
            problem = route_problem(key)
            if problem:
                raise InputError(f"gateway: route {key!r}: {problem}")
            self._check_pool(pool)
        self.with_shares(self.shares)

    def _check_pool(self, pool: str) -> None:
        if pool not in self.pools:
            raise InputError(f"gateway: no pool {pool!r} (pools: {', '.join(self.pools)})")

    def _check_share(self, pool: str, pct: int) -> None:
        if pool == self.baseline:
            raise InputError(f"gateway: weight {pool}: the baseline takes what the speculative shares leave; "
                             f"set {', '.join(self.speculative) or 'a speculative pool'}")
        if pool not in self.speculative:
            raise InputError(f"gateway: weight {pool}: no speculative pool {pool!r} "
                             f"(speculative pools: {', '.join(self.speculative) or 'none'})")
        if isinstance(pct, bool) or not isinstance(pct, int) or not 0 <= pct <= 100:
            raise InputError(f"gateway: weight {pool}={pct}: a share is a whole percentage from 0 to 100")

    # -- files ----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {"variants": list(self.variants), "baseline": self.baseline, "tenant_header": self.tenant_header,
                "tenants": dict(self.tenants), "routes": dict(self.routes), "shares": dict(self.shares),
                "canary_weights": self.canary_weights()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RoutingTable:
        return cls(variants=tuple(data["variants"]), baseline=str(data["baseline"]),
                   tenant_header=str(data.get("tenant_header") or DEFAULT_TENANT_HEADER),
                   tenants=dict(data.get("tenants") or {}), routes=dict(data.get("routes") or {}),
                   shares={k: int(v) for k, v in (data.get("shares") or {}).items()})


def parse_assignment(spec: str, option: str) -> tuple[str, str]:
    """``NAME=POOL`` from the command line."""
    name, sep, pool = spec.partition("=")
    if not sep or not name.strip() or not pool.strip():
        raise InputError(f"{option} {spec!r}: expected NAME=POOL")
    return name.strip(), pool.strip()


def parse_share(spec: str) -> tuple[str, int]:
    """``POOL=PCT`` (a whole percentage, 0-100; a trailing % is allowed)."""
    pool, sep, value = spec.partition("=")
    text = value.strip().removesuffix("%")
    if not sep or not pool.strip() or not text.lstrip("-").isdigit():
        raise InputError(f"gateway: weight {spec!r}: expected POOL=PCT with PCT a whole percentage from 0 to 100")
    pct = int(text)
    if not 0 <= pct <= 100:
        raise InputError(f"gateway: weight {spec!r}: {pct} is outside 0-100")
    return pool.strip(), pct

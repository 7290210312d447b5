"""The lab's `[gateway]` section: which tenants and routes exist and the pool each starts on.

A pool is a variant's backend, or ``canary``, the weighted split between the baseline and the
speculative variants. The names fixed here are the only ones the running gateway knows: a switch
command may move a tenant or route to another pool, never invent one (an unknown name is bad input),
so a rollback always knows every entry it has to move back.
"""

from __future__ import annotations

import re
from typing import Annotated, Final

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

CANARY: Final = "canary"
DEFAULT_TENANT_HEADER: Final = "X-Tenant"
BACKEND_HEADER: Final = "X-Speclab-Backend"
# Tenants end up as HAProxy map keys and Gateway API header values; routes as map keys and paths.
TENANT_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
ROUTE_RE: Final = re.compile(r"^(/[A-Za-z0-9._~/-]*|[A-Za-z0-9][A-Za-z0-9._:-]{0,127})$")
HEADER_RE: Final = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
RESERVED_HEADERS: Final = frozenset({"content-type", "content-length", "host", "x-request-id", "authorization",
                                     "transfer-encoding", "connection"})


def route_problem(key: str) -> str | None:
    """Why ``key`` cannot be a route (None if it can): a path prefix must also be a valid Gateway API
    ``PathPrefix`` (no ``//``, ``/./``, ``/../``; not ending in ``/.`` or ``/..``)."""
    if not ROUTE_RE.match(key):
        return "a route is a path prefix ('/v1/completions') or a model name"
    if key.startswith("/") and (any(bad in key for bad in ("//", "/./", "/../")) or key.endswith(("/.", "/.."))):
        return "a path prefix may not contain '//', '/./' or '/../', nor end in '/.' or '/..'"
    return None


class GatewaySection(BaseModel):
    """`[gateway]`: ``tenants = { A = "baseline", B = "k4" }``, ``routes = { "/v1/completions" = "k4" }``,
    ``weights = { k4 = 10 }`` (percent of the canary pool; the baseline takes the rest)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tenant_header: str = Field(default=DEFAULT_TENANT_HEADER, min_length=1, max_length=256)
    tenants: dict[str, str] = Field(default_factory=dict)
    routes: dict[str, str] = Field(default_factory=dict)
    weights: dict[str, Annotated[int, Field(ge=0, le=100)]] = Field(default_factory=dict)

    @field_validator("tenant_header")
    @classmethod
    def _header(cls, value: str) -> str:
        if not HEADER_RE.match(value):
            raise ValueError(f"expected an HTTP header name, got {value!r}")
        if value.lower() in RESERVED_HEADERS:
            raise ValueError(f"{value} is set by speclab itself; pick another header for tenants")
        return value

    @model_validator(mode="after")
    def _names(self) -> GatewaySection:
        for name in self.tenants:
            if not TENANT_RE.match(name):
                raise ValueError(f"tenants.{name}: a tenant is 1-63 letters, digits, '.', '_' or '-'")
        for key in self.routes:
            problem = route_problem(key)
            if problem:
                raise ValueError(f"routes.{key}: {problem}")
        if sum(self.weights.values()) > 100:
            raise ValueError(f"weights: the shares add up to {sum(self.weights.values())}%, more than 100%")
        return self

    def problems(self, variants: tuple[str, ...], baseline: str) -> list[str]:
        """What does not fit the lab's variants (checked by the lab, which knows them)."""
        out: list[str] = []
        if CANARY in variants:
            out.append(f"variants: {CANARY!r} is the name of the gateway's weighted pool; rename that variant")
        pools = (*variants, CANARY)
        for section, table in (("tenants", self.tenants), ("routes", self.routes)):
            for key, pool in table.items():
                if pool not in pools:
                    out.append(f"gateway.{section}.{key}: no pool {pool!r} (pools: {', '.join(pools)})")
        for pool in self.weights:
            if pool == baseline:
                out.append(f"gateway.weights.{pool}: the baseline takes what the speculative shares leave")
            elif pool not in variants:
                out.append(f"gateway.weights.{pool}: no variant {pool!r}")
        return out

"""A plan whose untagged requests are shared among tenants: every class is split across them.

A drill needs tenant-tagged traffic from any scenario, the bundled ``mixed`` one included, whose
classes name no tenant. Splitting by class (tenant A gets the factual questions, B the tool calls)
would confound tenant with class; here request ``i`` keeps its class, prompt and seed and goes
to ``tenants[i % len(tenants)]``, so each tenant sees the same class mix. Requests whose class
already names a tenant keep it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from speclab.model.errors import InputError
from speclab.model.gateway import DEFAULT_TENANT_HEADER, TENANT_RE

from .schedule import Plan, PlannedRequest


@dataclass
class TenantSplitPlan(Plan):
    tenants: tuple[str, ...] = ()
    tenant_header: str = DEFAULT_TENANT_HEADER

    def request(self, index: int) -> PlannedRequest:
        req = super().request(index)
        if req.tenant is not None or not self.tenants:
            return req
        tenant = self.tenants[index % len(self.tenants)]
        return replace(req, tenant=tenant, headers={**req.headers, self.tenant_header: tenant})


def split_among_tenants(plan: Plan, tenants: tuple[str, ...], tenant_header: str = DEFAULT_TENANT_HEADER
                        ) -> TenantSplitPlan:
    bad = [t for t in tenants if not TENANT_RE.match(t)]
    if bad or not tenants:
        raise InputError(f"tenants: expected 1-63 letters, digits, '.', '_' or '-', got {', '.join(bad) or 'none'}")
    if len(set(tenants)) != len(tenants):
        raise InputError(f"tenants: {', '.join(tenants)} names one tenant twice")
    values = {f.name: getattr(plan, f.name) for f in fields(Plan)}
    return TenantSplitPlan(**values, tenants=tuple(tenants), tenant_header=tenant_header)

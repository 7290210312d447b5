"""The same routing as Kubernetes Gateway API objects (``gateway.networking.k8s.io/v1``).

A ``Gateway`` and one ``HTTPRoute`` whose rules mirror the HAProxy configuration: a rule per
tenant (a header match, repeated at every path route so the tenant still wins there, as it does in
HAProxy: Gateway API ranks a longer path first and then more header matches), a rule per route
(a path prefix; a model name as a match on ``X-Gateway-Model-Name``, the header the Gateway API
inference extension's body-based router copies ``model`` into), and a last rule, the canary
pool, with weighted ``backendRefs``. Each pool is a Service ``<lab>-<variant>``; each backendRef
sets ``X-Speclab-Backend`` on its responses, as HAProxy does. The rollback is written as the
manifest it leaves and the diff that takes one to the other.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

import yaml

from speclab.model.errors import InputError
from speclab.model.gateway import BACKEND_HEADER, CANARY

from .routing import RoutingTable

API_VERSION = "gateway.networking.k8s.io/v1"
MODEL_HEADER = "X-Gateway-Model-Name"
SERVICE_PORT = 8000  # vllm serve's default port
MAX_RULES, MAX_MATCHES_PER_RULE, MAX_MATCHES, MAX_BACKEND_REFS = 16, 64, 128, 16  # HTTPRoute v1 limits
HEADER = (
    "# The speclab gateway's routing as Kubernetes Gateway API objects ({lab}).\n"
    "# Each pool is a Service <lab>-<variant> on port {port}; set gatewayClassName to your controller's class.\n"
    "# Model-name routes match " + MODEL_HEADER + ", which the Gateway API inference extension's body-based\n"
    "# router sets from the request's \"model\"; without it, route by path.\n"
)


def dns_label(text: str) -> str:
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return label[:63].strip("-") or "x"


def service_name(lab: str, variant: str) -> str:
    return dns_label(f"{lab}-{variant}")


def _backend_ref(lab: str, variant: str, port: int, weight: int | None = None) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": service_name(lab, variant), "port": port}
    if weight is not None:
        ref["weight"] = weight
    ref["filters"] = [{"type": "ResponseHeaderModifier",
                       "responseHeaderModifier": {"set": [{"name": BACKEND_HEADER, "value": variant}]}}]
    return ref


def _pool_refs(routing: RoutingTable, lab: str, pool: str, port: int) -> list[dict[str, Any]]:
    if pool == CANARY:
        return [_backend_ref(lab, v, port, w) for v, w in routing.canary_weights().items()]
    return [_backend_ref(lab, pool, port)]


def _names(prefix: str, keys: list[str], taken: set[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key in keys:
        base = dns_label(f"{prefix}-{key}")
        name, n = base, 2
        while name in taken:
            name, n = f"{base}-{n}", n + 1
        taken.add(name)
        out[key] = name
    return out


def http_route(routing: RoutingTable, lab: str, *, namespace: str | None = None,
               port: int = SERVICE_PORT) -> dict[str, Any]:
    paths = sorted((k for k in routing.routes if k.startswith("/")), key=lambda k: (-len(k), k))
    models = sorted(k for k in routing.routes if not k.startswith("/"))
    taken: set[str] = {CANARY}
    tenant_names = _names("tenant", sorted(routing.tenants), taken)
    route_names = _names("route", [*paths, *models], taken)
    rules: list[dict[str, Any]] = []
    for tenant in sorted(routing.tenants):
        matches = [{"path": {"type": "PathPrefix", "value": p},
                    "headers": [{"type": "Exact", "name": routing.tenant_header, "value": tenant}]}
                   for p in [*paths, "/"]]
        rules.append({"name": tenant_names[tenant], "matches": matches,
                      "backendRefs": _pool_refs(routing, lab, routing.tenants[tenant], port)})
    for key in [*paths, *models]:
        match: dict[str, Any] = (
            {"path": {"type": "PathPrefix", "value": key}} if key.startswith("/") else
            {"path": {"type": "PathPrefix", "value": "/"},
             "headers": [{"type": "Exact", "name": MODEL_HEADER, "value": key}]})
        rules.append({"name": route_names[key], "matches": [match],
                      "backendRefs": _pool_refs(routing, lab, routing.routes[key], port)})
    rules.append({"name": CANARY, "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                  "backendRefs": _pool_refs(routing, lab, CANARY, port)})
    _check_limits(rules)
    metadata: dict[str, Any] = {"name": dns_label(f"speclab-{lab}")}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": API_VERSION, "kind": "HTTPRoute", "metadata": metadata,
            "spec": {"parentRefs": [{"name": dns_label(f"speclab-{lab}")}], "rules": rules}}


def gateway(lab: str, *, namespace: str | None = None, gateway_class: str = "REPLACE-WITH-YOUR-GATEWAY-CLASS",
            ) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": dns_label(f"speclab-{lab}")}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": API_VERSION, "kind": "Gateway", "metadata": metadata,
            "spec": {"gatewayClassName": gateway_class,
                     "listeners": [{"name": "http", "protocol": "HTTP", "port": 80,
                                    "allowedRoutes": {"namespaces": {"from": "Same"}}}]}}


def _check_limits(rules: list[dict[str, Any]]) -> None:
    total = sum(len(r["matches"]) for r in rules)
    worst = max(len(r["matches"]) for r in rules)
    refs = max(len(r["backendRefs"]) for r in rules)
    if len(rules) > MAX_RULES or worst > MAX_MATCHES_PER_RULE or total > MAX_MATCHES or refs > MAX_BACKEND_REFS:
        raise InputError(
            f"gateway: {len(rules)} rules, {total} matches ({worst} in one rule), {refs} backends in one rule: "
            f"one HTTPRoute holds at most {MAX_RULES} rules, {MAX_MATCHES} matches ({MAX_MATCHES_PER_RULE} per rule) "
            f"and {MAX_BACKEND_REFS} backendRefs; use fewer tenants or routes")


def render(routing: RoutingTable, lab: str, *, namespace: str | None = None) -> str:
    docs = [gateway(lab, namespace=namespace), http_route(routing, lab, namespace=namespace)]
    body = yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False)
    return HEADER.format(lab=lab, port=SERVICE_PORT) + body


def write_manifests(routing: RoutingTable, lab: str, directory: Path, *, namespace: str | None = None
                    ) -> list[Path]:
    """``gateway-api.yaml`` (this routing), ``gateway-api-rollback.yaml`` and the diff between them."""
    now = render(routing, lab, namespace=namespace)
    back = render(routing.rolled_back(), lab, namespace=namespace)
    diff = "".join(difflib.unified_diff(now.splitlines(keepends=True), back.splitlines(keepends=True),
                                        fromfile="gateway-api.yaml", tofile="gateway-api-rollback.yaml"))
    paths = [directory / "gateway-api.yaml", directory / "gateway-api-rollback.yaml",
             directory / "gateway-api-rollback.diff"]
    for path, text in zip(paths, (now, back, diff or "# already on the baseline: a rollback changes nothing\n"),
                          strict=True):
        path.write_text(text, encoding="utf-8")
    return paths

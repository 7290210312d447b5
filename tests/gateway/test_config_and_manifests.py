"""The written files: haproxy.cfg (checked by the real `haproxy -c`), its maps, and the Gateway API
manifests (validated against the vendored Gateway API v1 schemas, plus the CEL rules that apply)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from speclab.gateway.config import GatewayFiles, find_haproxy, ordered_routes, write_config
from speclab.gateway.manifests import MODEL_HEADER, http_route, write_manifests
from speclab.gateway.routing import RoutingTable
from speclab.model.errors import InputError
from speclab.model.lab import load_lab

from .conftest import haproxy_or_skip, write_lab

SCHEMAS = Path(__file__).resolve().parent / "schema"
SERVERS = {"baseline": "127.0.0.1:18001", "k4": "127.0.0.1:18002"}


@pytest.fixture
def table(tmp_path: Path) -> RoutingTable:
    return RoutingTable.from_lab(load_lab(write_lab(tmp_path)), routes={"/v1": "baseline"}, shares={"k4": 10})


def test_haproxy_accepts_the_config_on_its_own_from_any_directory(tmp_path: Path, table: RoutingTable) -> None:
    haproxy = haproxy_or_skip()
    files = GatewayFiles.in_directory(tmp_path / "report")
    config = write_config(table, SERVERS, bind="127.0.0.1:18000", files=files, lab_name="gw")
    text = config.read_text()
    for map_file in re.findall(r"map(?:_beg)?\(([^,)]+)\)", text):
        assert Path(map_file).is_absolute() and Path(map_file).parent == files.directory
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = subprocess.run([haproxy, "-c", "-f", str(config)], cwd=elsewhere, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "http-response set-header X-Speclab-Backend %b" in text
    assert "server k4 127.0.0.1:18002 weight 10" in text and "server baseline 127.0.0.1:18001 weight 90" in text
    assert files.tenants_map.read_text() == "A baseline\nB k4\nC canary\n"
    # The longer prefix first: HAProxy's prefix match takes the first entry that matches.
    assert files.routes_map.read_text().splitlines() == ["/v1/completions k4", "/v1 baseline", "sim-8b canary"]
    assert find_haproxy() == haproxy


def test_routes_order_longest_prefix_first_then_models() -> None:
    assert ordered_routes({"m": "a", "/a": "b", "/a/b": "c"}) == [("/a/b", "c"), ("/a", "b"), ("m", "a")]


def _schema(name: str) -> jsonschema.protocols.Validator:
    schema = json.loads((SCHEMAS / name).read_text())
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema)


def _cel_problems(route: dict[str, Any]) -> list[str]:
    """The CEL rules of HTTPRoute v1 that bear on what speclab writes (jsonschema cannot run CEL)."""
    problems: list[str] = []
    rules = route["spec"]["rules"]
    if sum(len(r.get("matches", [])) for r in rules) >= 128:
        problems.append("total matches across rules must be less than 128")
    names = [r["name"] for r in rules if "name" in r]
    if len(names) != len(set(names)):
        problems.append("rule names must be unique")
    valid = re.compile(r"^(?:[-A-Za-z0-9/._~!$&'()*+,;=:@]|[%][0-9a-fA-F]{2})+$")
    for rule in rules:
        for match in rule.get("matches", []):
            path = match.get("path", {})
            value = path.get("value", "/")
            if path.get("type") in ("Exact", "PathPrefix") and (
                    not value.startswith("/") or any(b in value for b in ("//", "/./", "/../", "%2f", "%2F", "#"))
                    or value.endswith(("/..", "/.")) or not valid.match(value)):
                problems.append(f"bad path value {value!r}")
        for ref in rule.get("backendRefs", []):
            if ref.get("kind", "Service") == "Service" and not ref.get("group") and "port" not in ref:
                problems.append(f"backendRef {ref['name']} has no port")
            kinds = [f["type"] for f in ref.get("filters", [])]
            if len(kinds) != len(set(kinds)):
                problems.append(f"backendRef {ref['name']} repeats a filter")
    return problems


def test_manifests_validate_against_the_gateway_api_v1_schema(tmp_path: Path, table: RoutingTable) -> None:
    paths = write_manifests(table, "gw", tmp_path)
    validators = {"HTTPRoute": _schema("httproute-v1.schema.json"), "Gateway": _schema("gateway-v1.schema.json")}
    for path in paths[:2]:
        docs = list(yaml.safe_load_all(path.read_text()))
        assert sorted(d["kind"] for d in docs) == ["Gateway", "HTTPRoute"]
        for doc in docs:
            assert doc["apiVersion"] == "gateway.networking.k8s.io/v1"
            errors = [e.message for e in validators[doc["kind"]].iter_errors(doc)]
            assert errors == [], f"{path.name} {doc['kind']}: {errors}"
            if doc["kind"] == "HTTPRoute":
                assert _cel_problems(doc) == []


def test_the_schema_is_not_vacuous() -> None:
    validator = _schema("httproute-v1.schema.json")
    bad = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": {"name": "x"},
           "spec": {"rules": [{"matches": [{"headers": [{"type": "Fuzzy", "name": "bad header", "value": "A"}]}],
                               "backendRefs": [{"name": "svc", "port": 8000, "weight": -1}]}]}}
    messages = " ".join(e.message for e in validator.iter_errors(bad))
    assert "'Fuzzy' is not one of" in messages and "-1 is less than the minimum" in messages
    assert "does not match" in messages  # the header name pattern


def test_routing_means_the_same_in_both(table: RoutingTable) -> None:
    route = http_route(table.with_pool("route:sim-8b", "k4"), "gw")
    rules = {r["name"]: r for r in route["spec"]["rules"]}
    tenant_b = rules["tenant-b"]
    assert [m["path"]["value"] for m in tenant_b["matches"]] == ["/v1/completions", "/v1", "/"]
    assert all(m["headers"] == [{"type": "Exact", "name": "X-Tenant", "value": "B"}] for m in tenant_b["matches"])
    assert [r["name"] for r in tenant_b["backendRefs"]] == ["gw-k4"]
    assert rules["route-sim-8b"]["matches"][0]["headers"][0]["name"] == MODEL_HEADER
    canary = rules["canary"]
    assert [(r["name"], r["weight"]) for r in canary["backendRefs"]] == [("gw-baseline", 90), ("gw-k4", 10)]
    assert list(rules)[-1] == "canary" and list(rules)[:3] == ["tenant-a", "tenant-b", "tenant-c"]
    for ref in canary["backendRefs"]:
        header = ref["filters"][0]["responseHeaderModifier"]["set"][0]
        assert header["name"] == "X-Speclab-Backend" and ref["name"].endswith(header["value"])


def test_the_rollback_is_the_manifest_change_it_would_be(tmp_path: Path, table: RoutingTable) -> None:
    now, back, diff = write_manifests(table.with_pool("A", "canary"), "gw", tmp_path)
    assert diff.read_text().startswith("--- gateway-api.yaml\n+++ gateway-api-rollback.yaml\n")
    before, after = (next(d for d in yaml.safe_load_all(p.read_text()) if d["kind"] == "HTTPRoute") for p in (now, back))
    assert len(before["spec"]["rules"]) == len(after["spec"]["rules"])
    for old, new in zip(before["spec"]["rules"], after["spec"]["rules"], strict=True):
        # The same rules and matches: only where each rule sends its traffic changes.
        assert {k: v for k, v in old.items() if k != "backendRefs"} == {k: v for k, v in new.items() if k != "backendRefs"}
        live = [r["name"] for r in new["backendRefs"] if r.get("weight", 1) > 0]
        assert live == ["gw-baseline"], new["name"]
    assert "-    - name: gw-k4\n" in diff.read_text()


def test_more_than_one_httproute_holds_is_refused(table: RoutingTable) -> None:
    crowded = RoutingTable(variants=table.variants, baseline="baseline",
                           tenants={f"t{i}": "k4" for i in range(20)})
    with pytest.raises(InputError, match="one HTTPRoute holds at most 16 rules"):
        http_route(crowded, "gw")

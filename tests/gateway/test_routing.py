"""The routing as a value, the lab's [gateway] section and tenant-carrying scenarios (no processes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from speclab.gateway.routing import RoutingTable, parse_assignment, parse_share
from speclab.model.errors import InputError
from speclab.model.lab import Lab, load_lab
from speclab.model.scenario import Scenario
from speclab.traffic.schedule import build_plan

from .conftest import write_lab


@pytest.fixture
def lab(tmp_path: Path) -> Lab:
    return load_lab(write_lab(tmp_path))


def test_lab_section_becomes_the_table(lab: Lab) -> None:
    table = RoutingTable.from_lab(lab)
    assert table.variants == ("baseline", "k4") and table.baseline == "baseline"
    assert dict(table.tenants) == {"A": "baseline", "B": "k4", "C": "canary"}
    assert table.pools == ("baseline", "k4", "canary")
    assert table.canary_weights() == {"baseline": 100, "k4": 0}
    more = RoutingTable.from_lab(lab, tenants={"D": "k4", "A": "k4"}, shares={"k4": 30}, tenant_header="X-Org")
    assert more.tenants["A"] == "k4" and more.tenants["D"] == "k4" and more.tenant_header == "X-Org"
    assert more.canary_weights() == {"baseline": 70, "k4": 30}


def test_entries_resolve_by_name_or_prefix_and_unknown_ones_are_refused(lab: Lab) -> None:
    table = RoutingTable.from_lab(lab)
    assert table.entry("B") == ("tenant", "B")
    assert table.entry("/v1/completions") == ("route", "/v1/completions")
    assert table.entry("route:sim-8b") == ("route", "sim-8b")
    with pytest.raises(InputError, match="unknown tenant or route 'Z'"):
        table.with_pool("Z", "k4")
    with pytest.raises(InputError, match="unknown tenant 'sim-8b'"):
        table.entry("tenant:sim-8b")
    with pytest.raises(InputError, match="no pool 'k9'"):
        table.with_pool("B", "k9")
    assert table.with_pool("A", "canary").tenants["A"] == "canary"
    assert table.tenants["A"] == "baseline"  # a change is a new table


@pytest.mark.parametrize(("shares", "message"), [
    ({"k4": 101}, "from 0 to 100"), ({"k4": -1}, "from 0 to 100"), ({"baseline": 50}, "baseline takes"),
    ({"k2": 10}, "no speculative pool 'k2'"),
])
def test_shares_outside_their_range_or_pool_are_refused(lab: Lab, shares: dict[str, int], message: str) -> None:
    with pytest.raises(InputError, match=message):
        RoutingTable.from_lab(lab).with_shares(shares)


def test_rolled_back_puts_everything_on_the_baseline(lab: Lab) -> None:
    table = RoutingTable.from_lab(lab, shares={"k4": 40}).with_pool("route:sim-8b", "k4")
    back = table.rolled_back()
    assert set(back.tenants.values()) == set(back.routes.values()) == {"baseline"}
    assert back.canary_weights() == {"baseline": 100, "k4": 0}
    assert set(back.tenants) == set(table.tenants) and set(back.routes) == set(table.routes)
    assert RoutingTable.from_dict(table.to_dict()) == table


@pytest.mark.parametrize(("spec", "message"), [
    ("k4=101", "outside 0-100"), ("k4=-5", "outside 0-100"), ("k4=ten", "POOL=PCT"), ("k4", "POOL=PCT"),
])
def test_weight_arguments_are_whole_percentages(spec: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_share(spec)
    assert parse_share("k4=10%") == ("k4", 10)
    assert parse_assignment("A=k4", "--tenant") == ("A", "k4")
    with pytest.raises(InputError, match="NAME=POOL"):
        parse_assignment("A", "--tenant")


@pytest.mark.parametrize(("section", "message"), [
    ('tenants = { A = "k9" }', "gateway.tenants.A: no pool 'k9'"),
    ('routes = { "/v1//x" = "k4" }', "routes./v1//x: a path prefix may not contain"),
    ('weights = { baseline = 10 }', "gateway.weights.baseline: the baseline takes"),
    ('weights = { k4 = 120 }', "gateway.weights.k4: expected an integer at least 0 and at most 100, got 120"),
    ('tenant_header = "X-Request-Id"', "set by speclab itself"),
    ('tenants = { "a b" = "k4" }', "a tenant is 1-63 letters"),
])
def test_lab_gateway_section_problems_name_the_field(tmp_path: Path, section: str, message: str) -> None:
    text = write_lab(tmp_path).read_text().split("[gateway]")[0] + "[gateway]\n" + section + "\n"
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(InputError, match=message.replace(".", r"\.").replace("(", r"\(")):
        load_lab(path)


def _scenario(**classes: dict[str, object]) -> Scenario:
    return Scenario.model_validate({"name": "t", "requests": 40, "arrival": {"process": "constant", "rate": 5},
                                    "tenant_header": "X-Org", "classes": classes})


def test_a_class_tenant_and_headers_reach_every_planned_request() -> None:
    scenario = _scenario(a={"prompts": ["x"], "tenant": "A", "headers": {"X-Team": "search"}},
                         plain={"prompts": ["y"]})
    plan = build_plan(scenario)
    seen = {plan.request(i).prompt_class: plan.request(i) for i in range(40)}
    assert seen["a"].tenant == "A" and seen["a"].headers == {"X-Team": "search", "X-Org": "A"}
    assert seen["plain"].tenant is None and seen["plain"].headers == {}


@pytest.mark.parametrize(("spec", "message"), [
    ({"prompts": ["x"], "tenant": "has space"}, "tenant: 1-63"),
    ({"prompts": ["x"], "headers": {"Authorization": "Bearer x"}}, "set by speclab itself"),
    ({"prompts": ["x"], "headers": {"bad header": "1"}}, "not an HTTP header name"),
    ({"prompts": ["x"], "tenant": "A", "headers": {"x-org": "B"}}, "comes from tenant"),
])
def test_bad_tenants_and_headers_are_refused(spec: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _scenario(a=spec)


def test_a_share_for_a_variant_not_served_is_refused(tmp_path: Path) -> None:
    text = write_lab(tmp_path).read_text().replace('routes = {', 'weights = { k4 = 10 }\nroutes = {')
    (tmp_path / "w.toml").write_text(text)
    lab = load_lab(tmp_path / "w.toml")
    assert RoutingTable.from_lab(lab).shares == {"k4": 10}
    with pytest.raises(InputError, match="weight k4: no speculative pool 'k4'"):
        RoutingTable.from_lab(lab, variants=("baseline",), tenants={"B": "baseline"},
                              routes={"/v1/completions": "baseline"})


def test_a_directory_too_long_for_a_socket_path_gets_a_short_socket(tmp_path: Path) -> None:
    from speclab.gateway.config import SOCKET_DIR_PREFIX, GatewayFiles

    long_dir = tmp_path / ("d" * 120)
    files = GatewayFiles.in_directory(long_dir)
    assert files.config.parent == long_dir.resolve() and len(str(files.socket)) <= 107
    assert files.socket.parent.name.startswith(SOCKET_DIR_PREFIX)
    files.socket.parent.rmdir()
    assert GatewayFiles.in_directory(tmp_path).socket == tmp_path.resolve() / "haproxy.sock"

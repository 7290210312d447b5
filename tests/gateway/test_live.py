"""Through the real HAProxy in front of real simulator processes: tenants, routes, live switches
without a reload, canary shares, the one-step rollback and SSE passed through unbuffered."""

from __future__ import annotations

import asyncio
import collections
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import psutil

from speclab.gateway.controller import GatewayController
from speclab.model.records import RequestRecord
from speclab.model.scenario import Scenario
from speclab.traffic.client import Target, run_request
from speclab.traffic.schedule import PlannedRequest, build_plan

from ..outcome import assert_measured
from .conftest import MODEL, Gateway, read_events

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"


async def backend_of(session: aiohttp.ClientSession, url: str, *, tenant: str | None = None, path: str = CHAT) -> str:
    body: dict[str, object] = {"model": MODEL, "max_tokens": 2, "temperature": 0}
    if path == CHAT:
        body["messages"] = [{"role": "user", "content": "hello"}]
    else:
        body["prompt"] = "hello"
    headers = {"X-Tenant": tenant} if tenant else {}
    async with session.post(url + path, json=body, headers=headers) as resp:
        await resp.read()
        assert resp.status == 200, resp.status
        return str(resp.headers.get("X-Speclab-Backend"))


async def backends(url: str, asks: list[tuple[str | None, str]]) -> list[str]:
    async with aiohttp.ClientSession() as session:
        return [await backend_of(session, url, tenant=t, path=p) for t, p in asks]


def speclab(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "speclab.cli.main", "gateway", *args], capture_output=True,
                          text=True, timeout=60)


async def fire(target: Target, requests: list[PlannedRequest]) -> list[RequestRecord]:
    records: list[RequestRecord] = []
    timeout = aiohttp.ClientTimeout(total=60, sock_read=30)
    async with aiohttp.ClientSession() as session:
        start = time.monotonic()
        for req in requests:
            await run_request(session, target, req, time.monotonic() - start, records.append, run_start=start,
                              timeout=timeout)
    return records


async def test_tenants_pick_their_pools_and_each_record_says_who_answered(gateway: Gateway, fresh: GatewayController
                                                                         ) -> None:
    scenario = Scenario.model_validate({
        "name": "tenants", "requests": 30, "arrival": {"process": "constant", "rate": 10},
        "classes": {"a": {"prompts": ["What is the capital of France?"], "tenant": "A", "temperature": 0,
                          "max_tokens": 4},
                    "b": {"prompts": ["What is the capital of Spain?"], "tenant": "B", "temperature": 0,
                          "max_tokens": 4},
                    "anyone": {"prompts": ["Hello"], "temperature": 0, "max_tokens": 4}}})
    plan = build_plan(scenario)
    records = await fire(Target(variant="gw", base_url=gateway.url, model=MODEL), [plan.request(i) for i in range(30)])
    seen = collections.Counter((r.tenant, r.route, r.backend, r.error_kind) for r in records)
    assert set(seen) == {("A", CHAT, "baseline", None), ("B", CHAT, "k4", None), (None, CHAT, "baseline", None)}, seen
    assert await backends(gateway.url, [("A", COMPLETIONS), ("Z", COMPLETIONS), (None, COMPLETIONS)]) == [
        "baseline", "k4", "k4"]  # a tenant wins over a route; an unknown tenant takes the route
    log = (gateway.directory / "logs" / "haproxy.log").read_text()
    b = next(r for r in records if r.tenant == "B")
    assert any(b.request_id in line and " k4/k4 " in line and "{B|" in line for line in log.splitlines())


async def test_set_moves_a_tenant_live_without_a_reload(gateway: Gateway, fresh: GatewayController) -> None:
    before = await fresh.info()
    created = psutil.Process(int(before["Pid"])).create_time()
    assert int(before["Pid"]) == gateway.state.haproxy_pid
    assert await backends(gateway.url, [("B", CHAT)]) == ["k4"]
    done = speclab("set", "B", "baseline", "--report", str(gateway.directory), "--who", "alice")
    assert done.returncode == 0, done.stderr
    assert "tenant B: k4 -> baseline (alice)" in done.stdout and "unchanged, no reload" in done.stdout
    assert await backends(gateway.url, [("B", CHAT), ("B", COMPLETIONS)]) == ["baseline", "baseline"]
    after = await fresh.info()
    assert after["Pid"] == before["Pid"] and after["Start_time_sec"] == before["Start_time_sec"]
    assert int(after["Uptime_sec"]) >= int(before["Uptime_sec"])
    assert psutil.Process(int(after["Pid"])).create_time() == created
    event = read_events(gateway.directory)[-1]
    assert event["kind"] == "route_change" and event["data"]["who"] == "alice"
    assert event["data"]["what"] == {"kind": "tenant", "name": "B", "from": "k4", "to": "baseline"}
    assert abs(event["data"]["when"] - time.time()) < 600 and event["t"] > 0
    assert (gateway.directory / "tenants.map").read_text().splitlines()[1] == "B baseline"


async def test_weights_split_the_canary_pool_near_the_share(gateway: Gateway, fresh: GatewayController) -> None:
    await fresh.weight({"k4": 25}, who="test")
    counts = collections.Counter(await backends(gateway.url, [("C", CHAT)] * 20 + [(None, CHAT)] * 20))
    assert 6 <= counts["k4"] <= 14 and counts["k4"] + counts["baseline"] == 40, counts
    await fresh.weight({"k4": 100}, who="test")
    assert set(await backends(gateway.url, [("C", CHAT)] * 6)) == {"k4"}
    await fresh.weight({"k4": 0}, who="test")
    assert set(await backends(gateway.url, [("C", CHAT)] * 6)) == {"baseline"}
    assert [e["kind"] for e in read_events(gateway.directory)[-3:]] == ["weight_change"] * 3


async def test_a_model_name_route_is_read_from_the_body(gateway: Gateway, fresh: GatewayController) -> None:
    await fresh.set(f"route:{MODEL}", "k4", who="test")
    # A tenant wins over a route, even one pinned to the canary pool (all baseline here).
    assert await backends(gateway.url, [(None, CHAT), ("A", CHAT), ("C", CHAT)]) == ["k4", "baseline", "baseline"]


async def test_rollback_moves_every_tenant_and_route_to_the_baseline_in_one_step(gateway: Gateway,
                                                                                 fresh: GatewayController) -> None:
    await fresh.set("A", "k4", who="test")
    await fresh.set(MODEL, "canary", who="test")
    await fresh.weight({"k4": 100}, who="test")
    asks: list[tuple[str | None, str]] = [("A", CHAT), ("B", CHAT), ("C", CHAT), (None, CHAT), (None, COMPLETIONS),
                                          ("Z", CHAT)]
    assert set(await backends(gateway.url, asks)) == {"k4"}
    done = speclab("rollback", "--socket", gateway.state.socket, "--who", "on-call")
    assert done.returncode == 0, done.stderr
    assert "rollback to baseline" in done.stdout and "unchanged, no reload" in done.stdout
    assert set(await backends(gateway.url, asks)) == {"baseline"}
    events = read_events(gateway.directory)
    assert [e["kind"] for e in events].count("rollback") == 1
    rollback = events[-1]
    assert rollback["kind"] == "rollback" and rollback["data"]["who"] == "on-call"
    assert sorted(rollback["data"]["what"]["moved"]) == ["canary k4 100%", "route /v1/completions", f"route {MODEL}",
                                                         "tenant A", "tenant B", "tenant C"]
    routing = await fresh.routing()
    assert set(routing.tenants.values()) == set(routing.routes.values()) == {"baseline"}
    assert routing.canary_weights() == {"baseline": 100, "k4": 0}
    # The files beside the config describe the rolled-back routing, and still pass haproxy -c.
    assert set((gateway.directory / "tenants.map").read_text().split()[1::2]) == {"baseline"}
    assert re.search(r"server k4 \S+ weight 0\n", (gateway.directory / "haproxy.cfg").read_text())
    check = subprocess.run([gateway.state.haproxy, "-c", "-f", gateway.state.config], capture_output=True, text=True,
                           timeout=30)
    assert check.returncode == 0, check.stderr


async def test_sse_streams_arrive_chunk_by_chunk_through_haproxy(gateway: Gateway, fresh: GatewayController) -> None:
    scenario = Scenario.model_validate({
        "name": "sse", "requests": 1, "arrival": {"process": "constant", "rate": 1},
        "classes": {"long": {"prompts": ["Tell me a long story about the sea."], "tenant": "A", "temperature": 0,
                             "max_tokens": 96}}})
    req = build_plan(scenario).request(0)
    via, = await fire(Target(variant="gw", base_url=gateway.url, model=MODEL), [req])
    direct, = await fire(Target(variant="baseline", base_url=gateway.state.servers["baseline"], model=MODEL), [req])
    assert via.ok and direct.ok and via.backend == "baseline" and direct.backend is None
    assert via.output_token_ids == direct.output_token_ids and via.chunks >= 20
    # A buffering proxy would hand the whole stream over in one or two reads.
    assert via.token_reads >= max(10, direct.token_reads // 2), (via.token_reads, direct.token_reads)
    assert via.first_token is not None and via.done is not None and via.first_token < via.done


async def test_switches_refuse_bad_input_in_one_line(gateway: Gateway, tmp_path: Path) -> None:
    report = str(gateway.directory)
    events = read_events(gateway.directory)
    cases = [
        (("set", "Z", "k4", "--report", report), "unknown tenant or route 'Z'"),
        (("set", "B", "k9", "--report", report), "no pool 'k9'"),
        (("weight", "k4=101", "--report", report), "outside 0-100"),
        (("weight", "baseline=50", "--report", report), "the baseline takes"),
        (("rollback",), "give the running gateway's --socket PATH or its --report DIR"),
        (("rollback", "--socket", gateway.state.config), "is not a socket"),
        (("rollback", "--report", str(tmp_path)), "not a gateway's report directory"),
    ]
    for args, message in cases:
        done = speclab(*args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert done.stderr.count("\n") == 1 and message in done.stderr, (args, done.stderr)
    assert read_events(gateway.directory) == events  # nothing was applied


async def test_attach_by_socket_shows_the_running_gateway(gateway: Gateway, tmp_path: Path) -> None:
    lab = gateway.directory.parent / "gw.toml"
    done = speclab(str(lab), "--socket", gateway.state.socket)
    assert done.returncode == 0, done.stderr
    assert f"attached to {gateway.url}" in done.stdout and "A -> baseline" in done.stdout
    other = tmp_path / "other.toml"
    other.write_text(lab.read_text().replace('name = "gw"', 'name = "other"'))
    wrong = speclab(str(other), "--socket", gateway.state.socket)
    assert wrong.returncode == 2 and "serves lab 'gw', not 'other'" in wrong.stderr
    shown = speclab("show", "--json", "--report", str(gateway.directory))
    assert shown.returncode == 0 and '"tenant_header": "X-Tenant"' in shown.stdout


async def test_a_change_is_applied_over_one_connection_and_verified(gateway: Gateway, fresh: GatewayController
                                                                    ) -> None:
    event = await fresh.rollback(who="test")
    assert event.data["applied_s"] < 5.0  # the socket answered (not a speed claim: see bench/)
    assert event.data["before"]["tenants"]["B"] == "k4" and event.data["after"]["tenants"]["B"] == "baseline"
    assert await asyncio.wait_for(fresh.routing(), 10) == fresh.state.table().rolled_back()


async def test_a_scenario_run_through_the_gateway_records_tenant_route_and_backend(gateway: Gateway,
                                                                                   fresh: GatewayController,
                                                                                   tmp_path: Path) -> None:
    scenario = tmp_path / "tenants.toml"
    scenario.write_text(
        'name = "tenants"\nseed = 3\nrequests = 12\n[arrival]\nprocess = "constant"\nrate = 20\n'
        '[classes.a]\ntenant = "A"\nprompts = ["What is the capital of France?"]\ntemperature = 0\nmax_tokens = 8\n'
        '[classes.b]\ntenant = "B"\nheaders = { X-Team = "search" }\nprompts = ["What is the capital of Spain?"]\n'
        'temperature = 0\nmax_tokens = 8\n')
    done = subprocess.run([sys.executable, "-m", "speclab.cli.main", "run", str(scenario), "--attach",
                           f"gw={gateway.url}", "--record", str(tmp_path / "rec")], capture_output=True, text=True,
                          timeout=90)
    assert_measured(done)
    rows = [json.loads(line) for line in (tmp_path / "rec" / "requests.jsonl").read_text().splitlines()]
    seen = {(r["prompt_class"], r["tenant"], r["route"], r["backend"], r["error_kind"]) for r in rows}
    assert seen == {("a", "A", CHAT, "baseline", None), ("b", "B", CHAT, "k4", None)}, seen
    assert len(rows) == 12


async def test_a_stream_in_flight_on_k4_finishes_there_while_the_rollback_moves_new_requests(
        gateway: Gateway, fresh: GatewayController) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a long story."}], "max_tokens": 400,
            "ignore_eos": True, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    async with aiohttp.ClientSession() as session, session.post(gateway.url + CHAT, json=body,
                                                                 headers={"X-Tenant": "B"}) as resp:
        assert resp.headers["X-Speclab-Backend"] == "k4"
        first = await resp.content.readuntil(b"\n\n")
        assert first.startswith(b"data: {")
        await fresh.rollback(who="test")
        assert await backend_of(session, gateway.url, tenant="B") == "baseline"
        rest = await resp.content.read()
    # The stream went on after the rollback and ended normally, k4's speculative counts in its last event.
    assert rest.rstrip().endswith(b"data: [DONE]") and b'"completion_tokens":400' in rest
    assert b'"num_spec_tokens":4' in rest

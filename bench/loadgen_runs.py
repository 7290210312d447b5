"""One measured run: a fresh ground-truth server, one client driven from outside, both sides' records.

speclab is driven exactly as a user drives it, ``speclab run SCENARIO --attach URL --record DIR``
in a subprocess: its parent (aggregation, recording, scraping, progress lines) and its workers are
all in the measured tree, and its per-request figures come from the recording it writes
(``requests.jsonl``: request id, intended, sent, first_token, done, error_kind, in run-clock
seconds) and its health flags from ``events.jsonl``. The plain clients run the same plan from
``loadgen_client.py``. Each run gets its own server, so nothing of one run leaks into the next.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from loadgen_plan import Workload, planned, same_schedule, write_plain_plan, write_scenario
from loadgen_procs import Measured, run_measured
from loadgen_truth import ClientRecord, ServerLog

BENCH = Path(__file__).resolve().parent
MODEL = "loadgen-bench"
SATURATED_EVENT = "client_saturated"  # the event kind speclab's recording marks a saturated interval with


@dataclass(frozen=True)
class ServerConfig:
    ttft_ms: float = 50.0
    itl_ms: float = 10.0
    tokens: int = 64


@dataclass
class RunResult:
    client: str
    work: Workload
    planned: int
    records: list[ClientRecord]
    server: ServerLog
    measured: Measured
    wall_s: float
    host_busy_s: float  # all CPUs' busy time over the run (/proc/stat), this run's processes included
    flagged: set[int] = field(default_factory=set)  # speclab: intervals its health flag marked saturated
    schedule_gap_s: float = 0.0  # speclab: recorded intended times against the plan
    log: Path | None = None


def _host_busy() -> float:
    with open("/proc/stat", encoding="ascii") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class TruthServer:
    """The ground-truth server as a child process; ``stop`` makes it write and returns its records."""

    def __init__(self, config: ServerConfig, records: Path, log: Path) -> None:
        self.records = records
        self._log = open(log, "w", encoding="utf-8")  # noqa: SIM115 - closed in stop()
        argv = [sys.executable, str(BENCH / "loadgen_server.py"), "--records", str(records), "--model", MODEL,
                "--ttft-ms", str(config.ttft_ms), "--itl-ms", str(config.itl_ms), "--tokens", str(config.tokens)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._log, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()  # "listening http://HOST:PORT", or EOF if it died
        if not line.startswith("listening "):
            self.proc.kill()
            self.proc.wait()
            self.proc.stdout.close()
            self._log.close()
            raise RuntimeError(f"the ground-truth server did not start (see {log})")
        self.url = line.split(" ", 1)[1]

    def stop(self) -> ServerLog:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()
        return ServerLog.load(self.records)


def speclab_argv(scenario: Path, url: str, workers: int, record: Path, report: Path, *, base: bool = False) -> list[str]:
    """``base``: run as a module, so that a PYTHONPATH naming another source tree decides which speclab."""
    exe = Path(sys.executable).with_name("speclab")
    head = [str(exe)] if exe.exists() and not base else [sys.executable, "-m", "speclab.cli.main"]
    return [*head, "run", str(scenario), "--attach", f"bench={url}", "--workers", str(workers),
            "--record", str(record), "--report", str(report), "--force"]


def read_recording(record: Path, variant: str | None = None) -> tuple[list[ClientRecord], set[int]]:
    """The recording's records (of ``variant`` only, when given) and the intervals it flagged saturated."""
    records = []
    with open(record / "requests.jsonl", encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            if variant is not None and r.get("variant") != variant:
                continue
            records.append(ClientRecord(r["request_id"], r["intended"], r.get("sent"), r.get("first_token"),
                                        r.get("done"), r.get("error_kind") is None and r.get("done") is not None))
    flagged: set[int] = set()
    events = record / "events.jsonl"
    if events.exists():
        with open(events, encoding="utf-8") as fh:
            for line in fh:
                event = json.loads(line)
                if event.get("kind") == SATURATED_EVENT:
                    flagged.add(int((event.get("data") or {}).get("interval", -1)))
    return records, flagged


def read_plain(out: Path) -> list[ClientRecord]:
    data = json.loads(out.read_text())
    names = data["fields"]
    records = []
    for row in data["records"]:
        r = dict(zip(names, row, strict=True))
        records.append(ClientRecord(r["request_id"], r["intended"], r["sent"], r["first_token"], r["done"],
                                    r["error"] is None and r["done"] is not None))
    return records


def is_speclab(client: str) -> bool:
    return client.startswith(("speclab", "base"))


def run_client(client: str, work: Workload, server_config: ServerConfig, workdir: Path,
               base_src: Path | None = None, repeat: int = 0) -> RunResult:
    """``client``: ``speclabN`` (N workers), ``baseN`` (speclab from the source tree ``base_src``, an
    earlier commit, with N workers), ``uvloop`` or ``asyncio``; ``repeat``: which run of it at this rate."""
    tag = f"lb-{client}-r{work.rate:g}" + (f"-{repeat}" if repeat else "")
    run_dir = workdir / tag
    run_dir.mkdir(parents=True, exist_ok=True)
    scenario = write_scenario(run_dir / "scenario.toml", tag, work)
    plan = planned(scenario)
    index = {req.request_id: i for i, (_, req) in enumerate(plan)}
    busy0, began = _host_busy(), time.monotonic()
    server = TruthServer(server_config, run_dir / "server.json", run_dir / "server.log")
    log_path = run_dir / "client.log"
    try:
        with open(log_path, "w", encoding="utf-8") as log:
            env = None
            if is_speclab(client):
                base = client.startswith("base")
                workers = int(client.removeprefix("base" if base else "speclab") or 1)
                argv = speclab_argv(scenario, server.url, workers, run_dir / "recording", run_dir / "report", base=base)
                if base:
                    if base_src is None:
                        raise SystemExit(f"{client}: --base-src names the source tree to run")
                    env = {**os.environ, "PYTHONPATH": str(base_src.resolve())}
            else:
                write_plain_plan(run_dir / "plan.json", scenario, MODEL, work.endpoint)
                argv = [sys.executable, str(BENCH / "loadgen_client.py"), "--plan", str(run_dir / "plan.json"),
                        "--url", server.url, "--out", str(run_dir / "plain.json"), "--loop", client]
            measured = run_measured(argv, log=log, env=env, timeout_s=work.duration_s + 180.0)
    finally:
        truth = server.stop()
    wall = time.monotonic() - began
    busy = _host_busy() - busy0
    result = RunResult(client, work, len(plan), [], truth, measured, wall, busy, log=log_path)
    if is_speclab(client):
        if (run_dir / "recording" / "requests.jsonl").exists():
            result.records, result.flagged = read_recording(run_dir / "recording")
            recorded = {index[r.request_id]: r.intended for r in result.records if r.request_id in index}
            result.schedule_gap_s = same_schedule([offset for offset, _ in plan], recorded)
    elif (run_dir / "plain.json").exists():
        result.records = read_plain(run_dir / "plain.json")
    return result

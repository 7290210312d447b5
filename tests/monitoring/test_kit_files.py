"""`speclab monitoring-kit DIR`: the layout the file format pins, one-line refusals, a well-formed
dashboard, and only series vLLM 0.33 really declares (read from its source where it is cached)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from speclab.cli.main import cli
from speclab.monitoring import promql, rules
from speclab.monitoring.kit import DASHBOARD_FILE, Kit

from ..servers.parser_env import venv_python
from ..vllm_env import missing

VLLM_NAME = re.compile(r"vllm:[a-zA-Z0-9_]+")


def invoke(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(cli, list(args), env=env)


def test_writes_the_layout_conventions_pin(tmp_path: Path) -> None:
    out = invoke("monitoring-kit", str(tmp_path / "kit"))
    assert out.exit_code == 0, out.output
    files = sorted(p.name for p in (tmp_path / "kit").iterdir())
    assert files == sorted(["vllm-spec-decode.rules.yml", "vllm-spec-decode-alerts.rules.yml",
                            "vllm-spec-decode.test.yml", "vllm-spec-decode-alerts.test.yml", DASHBOARD_FILE])
    for test_file in (tmp_path / "kit").glob("*.test.yml"):
        for rule_file in yaml.safe_load(test_file.read_text())["rule_files"]:
            assert (tmp_path / "kit" / rule_file).is_file()
    board = json.loads((tmp_path / "kit" / DASHBOARD_FILE).read_text())
    assert isinstance(board["panels"], list) and board["panels"]
    assert "48 recording and 2 alerting rules" in out.stdout.splitlines()[-1]


@pytest.mark.parametrize(("where", "why"), [
    ("missing/kit", "parent directory"),
    ("a-file/kit", "is not a directory"),
    ("a-file", "exists and is not a directory"),
    ("full", "not empty (use --force"),
])
def test_bad_directory_exits_2_with_one_line(tmp_path: Path, where: str, why: str) -> None:
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "mine.txt").write_text("keep")
    out = invoke("monitoring-kit", str(tmp_path / where))
    assert out.exit_code == 2
    assert len(out.stderr.splitlines()) == 1 and why in out.stderr and out.stderr.startswith("speclab: error:")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a-file", "full", "mine.txt"]


def test_unwritable_directory_exits_2_with_one_line() -> None:
    out = invoke("monitoring-kit", "/proc/speclab-monitoring-kit")  # refused even to root
    assert out.exit_code == 2
    assert len(out.stderr.splitlines()) == 1 and "cannot write the kit" in out.stderr


@pytest.mark.parametrize(("interval", "why"), [("10m", "outside 1s..5m"), ("fast", "not a duration")])
def test_bad_scrape_interval_exits_2(tmp_path: Path, interval: str, why: str) -> None:
    out = invoke("monitoring-kit", str(tmp_path / "kit"), "--scrape-interval", interval)
    assert out.exit_code == 2 and len(out.stderr.splitlines()) == 1 and why in out.stderr
    assert not (tmp_path / "kit").exists()


def test_check_without_promtool_exits_2_before_writing(tmp_path: Path) -> None:
    out = invoke("monitoring-kit", str(tmp_path / "kit"), "--check", env={"PATH": str(tmp_path)})
    assert out.exit_code == 2 and "promtool not found" in out.stderr and len(out.stderr.splitlines()) == 1
    assert not (tmp_path / "kit").exists()


def test_force_rewrites_the_kit_and_leaves_other_files(tmp_path: Path) -> None:
    kit = tmp_path / "kit"
    kit.mkdir()
    (kit / "mine.txt").write_text("keep")
    (kit / DASHBOARD_FILE).write_text("stale")
    assert invoke("monitoring-kit", str(kit), "--force").exit_code == 0
    assert (kit / "mine.txt").read_text() == "keep"
    assert json.loads((kit / DASHBOARD_FILE).read_text())["uid"] == "speclab-vllm-spec-decode"


def test_rule_windows_follow_the_scrape_interval() -> None:
    fast, slow = rules.Windows.for_scrape_interval(15), rules.Windows.for_scrape_interval(60)
    assert (fast.rate, fast.spike, fast.baseline) == ("1m", "5m", "1h")
    assert (slow.rate, slow.spike, slow.baseline) == ("4m", "20m", "4h")
    assert "[4m]" in Kit.build(60).files["vllm-spec-decode.rules.yml"]


def _panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in board["panels"] if p["type"] != "row"]


def test_dashboard_grid_ids_datasource_and_selectors() -> None:
    board = json.loads(Kit.build().files[DASHBOARD_FILE])
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in board["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, p["title"]
        cells |= mine
    assert [r["title"] for r in board["panels"] if r["type"] == "row"] == [
        "Speculative decoding (vLLM)", "Latency split (vLLM)", "speclab load generator (--metrics-port)"]
    for p in _panels(board):
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        for t in p["targets"]:
            for m in re.finditer(VLLM_NAME, t["expr"]):
                assert t["expr"][m.end():].startswith('{job=~"$job",instance=~"$instance",model_name=~"$model_name"}')
            for m in re.finditer(r"speclab_[a-z_]+_(total|bucket)\b", t["expr"]):
                assert t["expr"][m.end():].startswith('{variant=~"$variant"}'), t["expr"]
    titles = {p["title"] for p in _panels(board)}
    assert {"Rejection rate", "Mean acceptance length", "Acceptance by draft position", "Verifications per request",
            "Queue time", "Prefill time", "Decode time", "End-to-end latency", "Time to first token"} <= titles
    assert {v["name"] for v in board["templating"]["list"]} == {"datasource", "job", "instance", "model_name", "variant"}


def _referenced_names() -> set[str]:
    kit = Kit.build()
    text = "\n".join(kit.files[name] for name in kit.files if name.endswith((".rules.yml", ".test.yml")))
    board = json.loads(kit.files[DASHBOARD_FILE])
    text += "\n".join(t["expr"] for p in _panels(board) for t in p["targets"])
    text += "\n".join(a.get("expr", "") for a in board["annotations"]["list"])
    text += "\n".join(v.get("definition", "") for v in board["templating"]["list"])
    return set(VLLM_NAME.findall(text))


def _declared_by_vllm() -> dict[str, str]:
    """vLLM 0.33's own declarations: name → counter / gauge / histogram."""
    site = next((venv_python().parent.parent / "lib").glob("python3*/site-packages/vllm"), None)
    if site is None:
        missing("vLLM 0.33 is not cached here (scripts/vllm_parser_env.sh builds it)")
    declared: dict[str, str] = {}
    loggers = (site / "v1/metrics/loggers.py").read_text()
    for kind, name in re.findall(r"self\._(counter|gauge|histogram)_cls\(\s*name=\"(vllm:[a-z0-9_]+)\"", loggers):
        declared[name] = kind
    declared.update(dict.fromkeys(re.findall(r'name = "(vllm:[a-z0-9_]+_info)"', loggers), "gauge"))
    spec = (site / "v1/spec_decode/metrics.py").read_text()
    declared.update(dict.fromkeys(re.findall(r'"(vllm:spec_decode_[a-z0-9_]+)"', spec), "counter"))
    return declared


def test_every_series_the_kit_reads_is_declared_by_vllm_with_its_type() -> None:
    declared = _declared_by_vllm()
    suffix_kind = {"_total": "counter", "_bucket": "histogram", "_sum": "histogram", "_count": "histogram"}
    referenced = _referenced_names()
    assert {promql.ACCEPTED_PER_POS, promql.CACHE_CONFIG_INFO, "vllm:num_requests_running"} <= referenced
    for name in sorted(referenced):
        base, kind = name, "gauge"
        for suffix, k in suffix_kind.items():
            if name.endswith(suffix) and name.removesuffix(suffix) in declared:
                base, kind = name.removesuffix(suffix), k
        assert declared.get(base) == kind, f"{name}: vLLM 0.33 declares {declared.get(base)!r}"

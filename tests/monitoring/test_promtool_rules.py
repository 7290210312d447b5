"""The kit's rules under Prometheus's own promtool: `check rules` passes, `test rules` passes, and the
tests fail when a rule is broken the way a careless edit would break it (so they assert something)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from speclab.cli.main import cli
from speclab.monitoring.kit import write_kit

from .tools import PROMTOOL, needs_promtool

pytestmark = needs_promtool


def promtool(kit: Path, *args: str) -> tuple[int, str]:
    assert PROMTOOL is not None
    proc = subprocess.run([PROMTOOL, *args], cwd=kit, capture_output=True, text=True, timeout=120, check=False)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("scrape", ["15s", "60s"])
def test_check_rules_and_test_rules_pass(tmp_path: Path, scrape: str) -> None:
    kit = tmp_path / "kit"
    write_kit(kit, scrape_s=int(scrape.removesuffix("s")))
    code, out = promtool(kit, "check", "rules", "vllm-spec-decode.rules.yml", "vllm-spec-decode-alerts.rules.yml")
    assert code == 0, out
    assert "SUCCESS: 48 rules found" in out and "SUCCESS: 2 rules found" in out
    code, out = promtool(kit, "test", "rules", "vllm-spec-decode.test.yml", "vllm-spec-decode-alerts.test.yml")
    assert code == 0, out
    assert out.count("SUCCESS") == 2


MUTATIONS = {
    # (file, before, after): the instance whose expectation must then fail
    "threshold too high misses the spike": ("vllm-spec-decode-alerts.rules.yml", "> 0.15", "> 0.5", "spiky:8000"),
    "threshold too low fires on the steady band": ("vllm-spec-decode-alerts.rules.yml", "> 0.15", "> 0.04",
                                                   "band:8000"),
    "no volume guard fires on the quiet server": ("vllm-spec-decode-alerts.rules.yml", "rate5m >= 1.0",
                                                  "rate5m >= 0.1", "quiet:8000"),
    "no pending period fires while the spike is still rising": ("vllm-spec-decode-alerts.rules.yml", "for: 2m",
                                                                 "for: 0s", "spiky:8000"),
    "acceptance length without the bonus token": ("vllm-spec-decode.rules.yml", "1 + (", "0 + (", "10.0.0.1:8000"),
    "per-position rate over draft tokens, not drafts": (
        "vllm-spec-decode.rules.yml",
        "/ on (job, instance, model_name) group_left ()\n      (sum by (job, instance, model_name) "
        "(rate(vllm:spec_decode_num_drafts_total",
        "/ on (job, instance, model_name) group_left ()\n      (sum by (job, instance, model_name) "
        "(rate(vllm:spec_decode_num_draft_tokens_total", 'position="0"'),
    "engines not summed": ("vllm-spec-decode.rules.yml", "sum by (job, instance, model_name) (rate(",
                           "sum by (job, instance, model_name, engine) (rate(", "10.0.0.1:8000"),
    "a time-scaled simulator's rates left per wall second": ("vllm-spec-decode.rules.yml", "speclab_sim_time_scale\n",
                                                             "speclab_sim_time_scale ^ 0\n", "10.0.0.3:8000"),
}


@pytest.mark.parametrize("mutation", list(MUTATIONS), ids=list(MUTATIONS))
def test_a_broken_rule_fails_the_kits_tests(tmp_path: Path, mutation: str) -> None:
    name, before, after, culprit = MUTATIONS[mutation]
    kit = tmp_path / "kit"
    write_kit(kit)
    text = (kit / name).read_text()
    assert before in text
    (kit / name).write_text(text.replace(before, after))
    test_file = name.replace(".rules.yml", ".test.yml")
    code, out = promtool(kit, "test", "rules", test_file)
    assert code != 0 and "FAILED" in out
    assert culprit in out, out[-3000:]


def test_check_flag_runs_promtool_on_what_it_wrote(tmp_path: Path) -> None:
    out = CliRunner().invoke(cli, ["monitoring-kit", str(tmp_path / "kit"), "--check"])
    assert out.exit_code == 0, out.output
    assert out.stdout.splitlines()[-2:] == [
        "promtool check rules vllm-spec-decode-alerts.rules.yml vllm-spec-decode.rules.yml: ok",
        "promtool test rules vllm-spec-decode-alerts.test.yml vllm-spec-decode.test.yml: ok",
    ]

"""The equivalence gate fails the lossy rejection methods and says why; block verification passes."""

from __future__ import annotations

import io
import json
from pathlib import Path

from speclab.model.exit_codes import ExitCode
from speclab.model.paths import bundled_dir
from speclab.session.accept import AcceptOptions, run_accept_stages

VARIANTS = """
[[variants]]
name = "block"
num_speculative_tokens = 3
rejection_sample_method = "block"
draft_sample_method = "probabilistic"

[[variants]]
name = "synthetic"
num_speculative_tokens = 3
rejection_sample_method = "synthetic"
synthetic_acceptance_length = 2.5
"""


async def test_synthetic_fails_equivalence_as_lossy_and_block_passes(tmp_path: Path) -> None:
    text = (bundled_dir("labs") / "default.toml").read_text()
    text = text.split("[[variants]]\nname = \"k2\"")[0] + VARIANTS
    text = text.split("[gateway]")[0]
    lab = tmp_path / "lossy.toml"
    lab.write_text(text)
    out = io.StringIO()
    code = await run_accept_stages(AcceptOptions(lab=str(lab), engine="sim", report_dir=tmp_path / "r",
                                                 stages=("equivalence",)), out=out)
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    gate = next(g for g in report["gates"] if g["stage"] == "equivalence")
    assert code == ExitCode.EQUIVALENCE, out.getvalue()
    assert gate["metrics"]["comparison"] == "exact"
    assert any("simulator: batch-invariant" in d for d in gate["details"])
    lossy = [d for d in gate["details"] if d.startswith("FAIL synthetic: rejection_sample_method 'synthetic' is lossy")]
    assert lossy and "lossless rejection_sample_method" in lossy[0]
    assert not [d for d in gate["details"] if d.startswith("FAIL") and " block " in f" {d} "], gate["details"]
    same = next(d for d in gate["details"] if d.startswith("greedy block: "))
    identical, total = same.split(": ")[1].split(" ")[0].split("/")
    assert identical == total and int(total) > 10, same

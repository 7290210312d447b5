"""The shipped sample (speclab/bundled/recordings/sample/) replays cleanly.

It was produced by a real run: ``speclab run mixed --duration 6 --record <dir>`` on the simulator.
"""

from __future__ import annotations

from speclab.model.paths import resolve
from speclab.model.snapshot import ALL_CLASSES
from speclab.recording import Recording, replay_final_snapshot


def test_sample_recording_opens_and_replays() -> None:
    path = resolve("sample", "recordings")
    assert sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) < 500_000
    rec = Recording.open(path)
    assert rec.complete and rec.warnings == []
    assert rec.variants == ["baseline", "k2", "k4"] and "tool_call" in rec.classes
    final = replay_final_snapshot(rec)
    assert final.finished and final.simulated
    for variant in ("k2", "k4"):
        total = final.cumulative[variant].classes[ALL_CLASSES]
        assert total.requests > 0 and total.acceptance.acceptance_length is not None
        assert total.acceptance.acceptance_length > 1.0
    assert final.cumulative["baseline"].total.acceptance.steps == 0
    assert rec.histograms("e2e_corrected").count > 0


def test_the_repository_has_the_top_level_recordings_folder_its_layout_promises() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    top = root / "recordings"
    assert top.is_dir() and not top.is_symlink()  # new recordings land here, not in the package
    assert (top / "sample" / "manifest.json").resolve() == (resolve("sample", "recordings") / "manifest.json").resolve()
    assert Recording.open(top / "sample").complete

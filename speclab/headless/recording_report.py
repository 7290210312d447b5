"""A report built from a recording: `speclab replay REC --report DIR`, and `speclab lab --report DIR`
(the lab records while it runs; its report is that recording's, written when the lab closes)."""

from __future__ import annotations

from pathlib import Path

from speclab.recording.reader import Recording
from speclab.recording.replay import recorded_final, replay_final, server_views, session_info, traffic_errors
from speclab.reports import build_report, write_report

from .progress import timeline_rows
from .run import flag_trailing


def write_recording_report(rec: Recording, report_dir: Path, *, command: str = "replay") -> list[Path]:
    """The report of everything ``rec`` holds, as its run would have written it; the paths written."""
    final, aggregator = replay_final(rec)
    recorded = recorded_final(rec)
    trailing = recorded.get("sim_trailing_intervals")
    workers = recorded.get("workers")
    report = build_report(session_info(rec), final, servers=server_views(rec), command=command,
                          timeline=flag_trailing(timeline_rows(aggregator, final.saturated_intervals),
                                                 trailing if isinstance(trailing, dict) else {}),
                          incomplete=traffic_errors(rec), extra={"recording": str(rec.path), "warnings": list(rec.warnings)},
                          workers=workers if isinstance(workers, list) else None)
    return write_report(report, report_dir)

"""`speclab replay NAME --refire [--lab OTHER]`: the recorded prompts at their recorded intended
times, sent to another lab configuration, then compared with the recording per class and variant."""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from speclab.headless.run import follow_to_end
from speclab.model.errors import InputError
from speclab.model.exit_codes import ExitCode
from speclab.model.lab import load_lab
from speclab.recording.compare import compare_recordings, render_markdown, write_comparison
from speclab.recording.reader import Recording
from speclab.recording.refire import refire_traffic_plan
from speclab.servers.backends.ids import AUTO, EngineRequest
from speclab.session.live import LiveSession
from speclab.session.options import RunOptions


@dataclass(frozen=True)
class RefireOptions:
    """What `speclab replay NAME --refire` takes: the lab to send to (default: the recorded one),
    the engine, where the comparison goes, and whether an unpaired lab may run."""

    lab_name: str | None = None
    engine: EngineRequest = AUTO
    report_dir: Path | None = None
    force: bool = False


async def refire(recording: Recording, opts: RefireOptions, out: TextIO = sys.stdout) -> ExitCode:
    lab_name = opts.lab_name or recording.manifest.get("lab")
    if not lab_name or lab_name == "attached":
        raise InputError(f"{recording.path}: the recording names no lab; give --lab for --refire")
    lab = load_lab(lab_name)
    variants = tuple(v for v in lab.variant_names if v in recording.variants) or lab.variant_names
    target = Path(tempfile.mkdtemp(prefix="speclab-refire-")) / "refire"
    options = RunOptions(scenario=str(recording.path), lab=lab_name, engine=opts.engine,
                         record_path=target, variants=variants, force=opts.force,
                         keep_records=False)
    session = LiveSession(options, plan=refire_traffic_plan(recording), lab=lab)
    print(f"refire: {recording.name} ({len(recording.records)} records) at lab {lab.name}", file=out)
    print(session.first_line(), file=out, flush=True)
    code = await follow_to_end(session, out)
    result = compare_recordings(recording, Recording.open(target))
    report_dir = opts.report_dir
    if report_dir is not None:
        write_comparison(result, Path(report_dir))
        print(f"comparison: {report_dir}/compare.json, {report_dir}/compare.md", file=out)
    else:
        print(render_markdown(result), file=out)
    print(f"refire recording: {target}", file=out)
    return code

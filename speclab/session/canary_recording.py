"""``speclab accept --record PATH``: the canary run recorded, the accept run's one slice of live mixed
traffic (with or without a gateway in front of the servers)."""

from __future__ import annotations

from pathlib import Path

from speclab.model.names import INTERVAL_S
from speclab.recording.guarded import GuardedWriter
from speclab.recording.writer import RecordingWriter
from speclab.traffic.schedule import Plan

from .accept_context import AcceptContext


def canary_recorder(ctx: AcceptContext, plan: Plan, *, command: str = "accept (canary)") -> RecordingWriter | None:
    """The writer for the canary's records and intervals, or None without ``--record``."""
    if ctx.record_path is None:
        return None
    manifest = {
        "lab": ctx.lab.name, "scenario": plan.name, "command": command, "pair": ctx.pair,
        "variants": list(ctx.variants), "classes": [c.name for c in plan.classes], "simulated": ctx.engine.simulated,
        "engine": str(ctx.engine), "interval_s": INTERVAL_S, "warmup_s": 0.0, "time_scale": ctx.time_scale.s,
        "arrival": {"mode": plan.mode, "process": plan.process, **plan.overrides},
        "servers": {n: {"command": s.command, "settings": s.settings, "memory": s.memory.as_dict(), "engine": s.engine,
                        "baseline": s.baseline} for n, s in ctx.servers.items()},
    }
    writer = GuardedWriter(Path(ctx.record_path), manifest, force=ctx.force,
                           on_failure=lambda line: ctx.say(f"  canary: warning: {line}"))
    writer.write_prompts(plan.prompt_items())
    return writer

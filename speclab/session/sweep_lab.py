"""The lab one sweep cell runs: the user's lab with one variant set to the cell's configuration.

Every cell launches through the lab file's own validation and the same argv code as any run,
so a cell's server is exactly what ``speclab lab show`` would print for those settings. The
cell's variant is named after the configuration (``k4``, ``k0-seqs128``) so its recording and
report say what ran; the lab's baseline stays beside it (a lab must have one) but is not launched.
Settings the lab file cannot carry are refused before anything starts, never dropped.
"""

from __future__ import annotations

from typing import Any

from speclab.model.errors import InputError
from speclab.model.lab import Lab, Variant
from speclab.sweep import CellConfig

SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
BATCH_KEYS = ("max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill")


def lab_carries_schedules() -> bool:
    """Whether this speclab's lab file takes a per-batch k schedule on a variant."""
    return SCHEDULE_KEY in Variant.model_fields


def cell_variant(config: CellConfig) -> str:
    return config.key


def cell_lab(lab: Lab, config: CellConfig) -> tuple[Lab, str]:
    """(the lab to launch for ``config``, the variant to run); InputError naming what the lab refuses."""
    data = lab.model_dump()
    name = cell_variant(config)
    base = next(v for v in data["variants"] if not v["speculative"])
    source = next((v for v in data["variants"] if v["speculative"]), base)
    if config.speculative and lab.draft is None:
        raise InputError(f"k: k={config.k} needs a draft, and lab {lab.name!r} has no [draft] section")
    if config.schedule is not None and not lab_carries_schedules():
        raise InputError(f"schedules: this speclab's lab file cannot carry {SCHEDULE_KEY} yet, so a schedule "
                         "arm cannot be launched; sweep fixed k values")
    cell: dict[str, Any] = {**(source if config.speculative else base), "name": name,
                            "speculative": config.speculative,
                            "num_speculative_tokens": config.k if config.speculative else None,
                            "sim_faults": list((source if config.speculative else base).get("sim_faults") or [])}
    if config.schedule is not None:
        cell[SCHEDULE_KEY] = [list(e) for e in config.schedule]
    elif SCHEDULE_KEY in cell:
        cell[SCHEDULE_KEY] = None
    for key in BATCH_KEYS:
        value = getattr(config, key)
        if value is not None:
            cell[key] = value
    if lab.server.topology == "shared":
        # The share the lab gives its speculative variant, not half a GPU for the idle baseline.
        cell["gpu_memory_utilization"] = lab.effective(source["name"]).gpu_memory_utilization
    others = [] if not config.speculative else [{**base, "name": "baseline" if name != "baseline" else "base"}]
    data["variants"] = [cell, *others]
    data["gateway"] = {}
    try:
        return Lab.model_validate(data), name
    except ValueError as error:
        first = str(error).splitlines()
        detail = first[2].strip() if len(first) > 2 else first[0]
        raise InputError(f"config {config.arm()}: lab {lab.name!r} refuses it: {detail}") from None

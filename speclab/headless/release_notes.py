"""``release.json``: one release's facts gathered from its accept, sweep and drill reports.

The checklist asks the release to name the pair (point 12), carry the grid search's result (point
2), the gates and the four headline metrics, the memory table with the topology (point 9) and the
rehearsed rollback (point 11). Everything here is read from the reports as they were written, never
measured again; where an input is missing the document says so instead of leaving a silent gap.

Each input carries its simulator time scale S (``time_scale``, per input and in the section built
from it): under S ≠ 1 every time, rate and duration of that input is modelled time, and the note
labels it so. Inputs at different scales are noted in ``warnings``.
"""

from __future__ import annotations

import time
from typing import Any, Final

from speclab import __version__
from speclab.gates.stages import STAGE_EXIT_CODES, STAGE_ORDER
from speclab.model.exit_codes import ExitCode
from speclab.model.names import Metric

from .release_inputs import ACCEPT, DRILL, HOW_TO_MAKE, KINDS, SWEEP, ReleaseInput, ReleaseInputs

RELEASE_SCHEMA: Final = "speclab.release/1"
ROLLBACK_DRILL: Final = "rollback_drill"
E2E: Final = Metric.E2E_CORRECTED.value
E2E_POINTS: Final = ("p50_ms", "p90_ms", "p99_ms", "p999_ms")


def _pair(inputs: ReleaseInputs) -> dict[str, Any]:
    """The pair as the release names it; tokenizer hashes of the real files, else the stand-ins'."""
    merged: dict[str, str] = {}
    for item in inputs.present():
        for key, value in item.pair.items():
            merged.setdefault(key, value)
    out: dict[str, Any] = {k: merged.get(k) or None for k in
                           ("target_model", "target_revision", "draft_model", "draft_revision")}
    out["method"] = merged.get("draft_method") or None
    for role in ("target", "draft"):
        real, sim = merged.get(f"{role}_tokenizer_sha256"), merged.get(f"{role}_sim_tokenizer_sha256")
        out[f"{role}_tokenizer_sha256"] = real or sim
        out[f"{role}_tokenizer_source"] = "tokenizer file" if real else ("simulator stand-in" if sim else None)
    out["paired"] = merged.get("paired")
    out["pairing"] = merged.get("reason")
    return out


def _gates(accept: ReleaseInput | None, drill: ReleaseInput | None) -> list[dict[str, Any]]:
    """Every gate in the checklist's order, the rollback drill last; a gate not run says so."""
    ran = {g.get("stage"): g for g in (accept.doc.get("gates") or [])} if accept else {}
    out = []
    for stage in STAGE_ORDER:
        g = ran.get(stage)
        if g is None:
            why = "no accept report" if accept is None else "not run by this accept"
            out.append({"stage": stage, "status": "not run", "exit_code": int(STAGE_EXIT_CODES[stage]), "summary": why})
        else:
            out.append({"stage": stage, "status": g.get("status") or ("passed" if g.get("passed") else "failed"),
                        "exit_code": int(STAGE_EXIT_CODES[stage]), "summary": g.get("summary", "")})
    out.append(_drill_gate(drill))
    return out


def _drill_gate(drill: ReleaseInput | None) -> dict[str, Any]:
    base = {"stage": ROLLBACK_DRILL, "exit_code": int(ExitCode.ROLLBACK_DRILL)}
    if drill is None:
        return {**base, "status": "not run", "summary": "no drill report"}
    block = drill.doc["drill"]
    code = (drill.doc.get("exit") or {}).get("code")
    if code is not None:
        passed = int(code) == 0
    else:
        passed = bool(block.get("converged")) and not block.get("failed_during_flip")
    reason = (drill.doc.get("exit") or {}).get("reason") or (
        f"converged={block.get('converged')}, failed during the flip {block.get('failed_during_flip')}")
    return {**base, "status": "passed" if passed else "failed", "summary": reason}


def _baseline_name(report: dict[str, Any]) -> str | None:
    for name, v in (report.get("variants") or {}).items():
        if v.get("baseline"):
            return str(name)
    return None


def _last_epoch(variant: dict[str, Any]) -> dict[str, Any] | None:
    epochs = variant.get("epochs") or []
    return epochs[-1] if epochs else None


def _e2e(block: dict[str, Any]) -> dict[str, Any]:
    lat = (block.get("latency") or {}).get(E2E) or {}
    return {p: lat.get(p) for p in E2E_POINTS}


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 4)


def _headline(accept: ReleaseInput | None) -> dict[str, Any] | None:
    """The four headline metrics per class for every speculative variant, beside the baseline's."""
    if accept is None:
        return None
    report = accept.doc
    base_name = _baseline_name(report)
    variants = report.get("variants") or {}
    base_epoch = _last_epoch(variants[base_name]) if base_name else None
    base_classes = (base_epoch or {}).get("classes") or {}
    rows = []
    for name, v in variants.items():
        if name == base_name:
            continue
        for epoch in v.get("epochs") or []:
            for cls, block in (epoch.get("classes") or {}).items():
                acc, st = block.get("acceptance") or {}, block.get("structured") or {}
                base = base_classes.get(cls) or {}
                e2e, base_e2e = _e2e(block), _e2e(base)
                base_sfr = (base.get("structured") or {}).get("failure_rate")
                sfr = st.get("failure_rate")
                rows.append({
                    "variant": name, "label": epoch.get("label") or name, "epoch": epoch.get("epoch"), "class": cls,
                    "requests": block.get("requests"), "baseline_requests": base.get("requests"),
                    "acceptance_length_mean": acc.get("acceptance_length_mean"),
                    "acceptance_length_distribution": list(acc.get("acceptance_length_distribution") or []),
                    "acceptance_source": acc.get("source"),
                    "rejection_rate": acc.get("rejection_rate"),
                    "e2e_ms": e2e, "baseline_e2e_ms": base_e2e,
                    "e2e_p50_ratio": _ratio(e2e["p50_ms"], base_e2e["p50_ms"]),
                    "e2e_p99_ratio": _ratio(e2e["p99_ms"], base_e2e["p99_ms"]),
                    "structured": {"total": st.get("total"), "failed": st.get("failed"), "failure_rate": sfr},
                    "baseline_structured_failure_rate": base_sfr,
                    "structured_delta_points": None if sfr is None or base_sfr is None else round(100 * (sfr - base_sfr), 3),
                })
    return {"baseline": base_name, "from_stage": report.get("variant_tables_from"), "latency": E2E,
            "time_scale": accept.time_scale, "rows": rows}


def _schedule(sweep: ReleaseInput | None) -> dict[str, Any] | None:
    if sweep is None:
        return None
    doc = sweep.doc
    evidence = doc.get("schedule_evidence") or {}
    return {"schedule": doc.get("schedule"), "speculative_config": doc.get("speculative_config"),
            "crossover": doc.get("crossover"), "best_fixed_k": doc.get("best_fixed_k"),
            "objective": evidence.get("objective"), "class": evidence.get("class"),
            "no_crossover": doc.get("no_crossover") or [], "complete": doc.get("complete"),
            "notes": doc.get("notes") or [], "time_scale": sweep.time_scale,
            "time_scale_by_load": sweep.time_scale_by_load or None}


def _topology(report: dict[str, Any]) -> dict[str, Any]:
    """Which GPUs each server ran on (from its settings) and whether servers shared any."""
    servers: dict[str, Any] = {}
    for name, v in (report.get("variants") or {}).items():
        settings = (v.get("server") or {}).get("settings") or {}
        servers[name] = {"gpus": settings.get("gpus"), "tensor_parallel_size": settings.get("tensor_parallel_size"),
                         "speculative": bool(settings.get("num_speculative_tokens")), "method": settings.get("method")}
    known = [tuple(s["gpus"]) for s in servers.values() if s["gpus"]]
    flat = [g for gpus in known for g in gpus]
    between = None if not known else "shared" if len(flat) != len(set(flat)) else "separate"
    return {"servers": servers, "between_servers": between,
            "draft_and_target": "same GPUs (vLLM runs the draft inside each speculative server)"}


def _memory(inputs: ReleaseInputs) -> dict[str, Any] | None:
    for item in (inputs.accept, inputs.drill):
        if item is not None and item.doc.get("memory"):
            return {"from": item.kind, "rows": item.doc["memory"], "gpu_memory": item.doc.get("gpu_memory") or [],
                    "topology": _topology(item.doc)}
    return None


def _drill(drill: ReleaseInput | None) -> dict[str, Any] | None:
    if drill is None:
        return None
    return {**drill.doc["drill"], "lab": drill.doc.get("lab"), "scenario": drill.doc.get("scenario"),
            "verdict": _drill_gate(drill)["status"], "time_scale": drill.time_scale}


def _time_scale(item: ReleaseInput | None) -> float | None:
    return None if item is None else item.time_scale


def _verdict(gates: list[dict[str, Any]], missing: list[str]) -> str:
    if any(g["status"] == "failed" for g in gates):
        return "blocked: " + ", ".join(g["stage"] for g in gates if g["status"] == "failed") + " failed"
    if missing:
        return "incomplete: no " + ", ".join(f"{m} report" for m in missing)
    if any(g["status"] != "passed" for g in gates):
        return "incomplete: " + ", ".join(g["stage"] for g in gates if g["status"] != "passed") + " not run"
    return "every gate passed"


def release_document(inputs: ReleaseInputs) -> dict[str, Any]:
    """``release.json``: the pair, gates, headline metrics, schedule, memory and drill of one release."""
    gates = _gates(inputs.accept, inputs.drill)
    missing = inputs.missing
    present = inputs.present()
    return {
        "schema": RELEASE_SCHEMA,
        "speclab_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "simulated": any(i.simulated for i in present),
        "lab": next((i.doc.get("lab") for i in present if i.doc.get("lab")), None),
        "inputs": {kind: str(getattr(inputs, kind).path) if getattr(inputs, kind) else None for kind in KINDS},
        "time_scale": {kind: _time_scale(getattr(inputs, kind)) for kind in KINDS},
        "warnings": list(inputs.warnings),
        "missing": [{"kind": m, "made_by": HOW_TO_MAKE[m]} for m in missing],
        "verdict": _verdict(gates, missing),
        "pair": _pair(inputs),
        "gates": gates,
        "headline": _headline(inputs.accept),
        "schedule": _schedule(inputs.sweep),
        "memory": _memory(inputs),
        "drill": _drill(inputs.drill),
    }


__all__ = ["ACCEPT", "DRILL", "RELEASE_SCHEMA", "SWEEP", "release_document"]

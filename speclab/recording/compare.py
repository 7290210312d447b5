"""Compare two recordings per variant, config epoch and class: latency split, acceptance,
structured output, throughput, and output equality where sampling was greedy.

Both sides are recomputed from their records (``replay_final_snapshot``), so a comparison never
depends on how either run was displayed. Epochs pair by number (a variant's epoch 2 in A with its
epoch 2 in B); transitions are in neither. Rows are keyed by the variant for epoch 1 and
``variant·N`` for epoch N. Deltas are ``b - a``; ``ratio`` is ``b / a``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from speclab.metrics.epochs import EpochBook
from speclab.model.errors import writing
from speclab.model.latency_metrics import Shown, shown_in
from speclab.model.prompt_ref import record_digest
from speclab.model.records import RequestRecord
from speclab.model.snapshot import ALL_CLASSES, ClassStats, EpochStats, Snapshot

from .reader import Recording
from .replay import replay_final_snapshot
from .writer import write_json_atomic

COMPARED_METRICS = shown_in(Shown.COMPARE)
COMPARED_POINTS = (50.0, 90.0, 99.0, 99.9)


def _delta(a: float | None, b: float | None) -> dict[str, float | None]:
    return {
        "a": a,
        "b": b,
        "delta": None if a is None or b is None else b - a,
        "ratio": None if a is None or b is None or a == 0 else b / a,
    }


def _class_numbers(stats: ClassStats) -> dict[str, Any]:
    latency: dict[str, dict[str, int | None]] = {}
    for metric in COMPARED_METRICS:
        pct = stats.latency.get(metric.value)
        latency[metric.value] = {f"p{p:g}": (pct.at(p) if pct else None) for p in COMPARED_POINTS}
    acc = stats.acceptance
    return {
        "requests": stats.requests,
        "errors": stats.error_count,
        "latency_us": latency,
        "acceptance_length": acc.acceptance_length,
        "rejection_rate": acc.rejection_rate,
        "verifications_per_request": acc.verifications_per_request,
        "acceptance_source": acc.source,
        "structured_failure_rate": stats.structured_failure_rate,
        "requests_per_s": stats.requests_per_s,
        "output_tokens_per_s": stats.output_tokens_per_s,
    }


def _compare_class(a: ClassStats, b: ClassStats) -> dict[str, Any]:
    na, nb = _class_numbers(a), _class_numbers(b)
    out: dict[str, Any] = {"latency_us": {}}
    for metric, points in na["latency_us"].items():
        out["latency_us"][metric] = {p: _delta(v, nb["latency_us"][metric][p]) for p, v in points.items()}
    for key in na:
        if key != "latency_us" and key != "acceptance_source":
            out[key] = _delta(na[key], nb[key])
    out["acceptance_source"] = {"a": na["acceptance_source"], "b": nb["acceptance_source"]}
    return out


def is_greedy(sampling: Mapping[str, Any]) -> bool:
    temperature = sampling.get("temperature")
    return (temperature is not None and float(temperature) == 0.0) or sampling.get("top_k") == 1


def match_key(record: RequestRecord, *, same_plan: bool = True) -> tuple[Any, ...]:
    """The plan position and prompt digest when both runs fired the same plan, else the prompt
    digest alone: a position never matches two different prompts."""
    prompt = record.prompt or {}
    digest = record_digest(prompt)
    if same_plan and "index" in prompt:
        return ("index", prompt["index"], digest)
    if digest is not None:
        return ("prompt", digest)
    return ("id", record.request_id)


def _keyed(records: Iterable[RequestRecord], variant: str, same_plan: bool = True) -> dict[tuple[Any, ...], RequestRecord]:
    """Successful non-warm-up records of a variant by match key; repeats of a key get an ordinal."""
    out: dict[tuple[Any, ...], RequestRecord] = {}
    seen: dict[tuple[Any, ...], int] = defaultdict(int)
    for r in sorted((r for r in records if r.variant == variant), key=lambda r: r.intended):
        if not r.ok or r.warmup:
            continue
        key = match_key(r, same_plan=same_plan)
        out[(*key, seen[key])] = r
        seen[key] += 1
    return out


def compare_outputs(a: Iterable[RequestRecord], b: Iterable[RequestRecord], variant_a: str,
                    variant_b: str | None = None, *, same_plan: bool = True) -> dict[str, Any]:
    """Greedy requests matched across runs: identical or differing token ids, first differing position."""
    left, right = _keyed(a, variant_a, same_plan), _keyed(b, variant_b or variant_a, same_plan)
    identical = differing = skipped = 0
    examples: list[dict[str, Any]] = []
    positions: list[int] = []
    by_class: dict[str, dict[str, int]] = defaultdict(lambda: {"identical": 0, "differing": 0})
    for key in sorted(set(left) & set(right), key=repr):
        ra, rb = left[key], right[key]
        if not (is_greedy(ra.sampling) and is_greedy(rb.sampling)):
            skipped += 1
            continue
        ids_a, ids_b = ra.output_token_ids, rb.output_token_ids
        if ids_a == ids_b:
            identical += 1
            by_class[ra.prompt_class]["identical"] += 1
            continue
        differing += 1
        by_class[ra.prompt_class]["differing"] += 1
        first = next((i for i, (x, y) in enumerate(zip(ids_a, ids_b, strict=False)) if x != y), min(len(ids_a), len(ids_b)))
        positions.append(first)
        if len(examples) < 5:
            examples.append({"class": ra.prompt_class, "request_a": ra.request_id, "request_b": rb.request_id,
                             "first_differing_token": first, "tokens_a": len(ids_a), "tokens_b": len(ids_b)})
    return {
        "matched": identical + differing,
        "identical": identical,
        "differing": differing,
        "not_greedy": skipped,
        "unmatched_a": len(set(left) - set(right)),
        "unmatched_b": len(set(right) - set(left)),
        "first_differing_position_min": min(positions) if positions else None,
        "by_class": dict(by_class),
        "examples": examples,
    }


def epoch_key(variant_a: str, variant_b: str, epoch: int) -> str:
    name = variant_a if variant_a == variant_b else f"{variant_a}->{variant_b}"
    return name if epoch == 1 else f"{name}·{epoch}"


def _epochs(snap: Snapshot, variant: str) -> dict[int, EpochStats]:
    found = snap.epochs.get(variant)
    if found:
        return {e.info.epoch: e for e in found}
    return {}


def paired_epochs(a: Snapshot, b: Snapshot, pairs: Iterable[tuple[str, str]]
                  ) -> list[tuple[str, str, str, EpochStats, EpochStats]]:
    """(key, variant in A, variant in B, A's epoch, B's epoch) for every epoch both sides have."""
    out = []
    for va, vb in pairs:
        ea, eb = _epochs(a, va), _epochs(b, vb)
        for number in sorted(set(ea) & set(eb)):
            out.append((epoch_key(va, vb, number), va, vb, ea[number], eb[number]))
    return out


def compare_snapshots(a: Snapshot, b: Snapshot, pairs: Iterable[tuple[str, str]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, _, _, ea, eb in paired_epochs(a, b, pairs):
        sa, sb = ea.stats, eb.stats
        classes = [c for c in sa.classes if c in sb.classes]
        classes.sort(key=lambda c: (c == ALL_CLASSES, c))
        out[key] = {c: _compare_class(sa.classes[c], sb.classes[c]) for c in classes}
    return out


def records_by_epoch(recording: Recording) -> dict[tuple[str, int], list[RequestRecord]]:
    """The recording's records per (variant, epoch), transitions left out, as its replay places them."""
    book = EpochBook()
    for event in recording.events:
        book.on_event(event)
    out: dict[tuple[str, int], list[RequestRecord]] = defaultdict(list)
    for record in recording.records:
        epoch = book.place(record)
        if epoch is not None:
            out[(record.variant, epoch)].append(record)
    return out


def compare_recordings(a: Recording, b: Recording, *, variant_map: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Per variant (same name, or ``variant_map[a_name] = b_name``), epoch and class, B against A."""
    pairs = [(v, (variant_map or {}).get(v, v)) for v in a.variants]
    pairs = [(va, vb) for va, vb in pairs if vb in b.variants]
    snap_a, snap_b = replay_final_snapshot(a), replay_final_snapshot(b)
    paired = paired_epochs(snap_a, snap_b, pairs)
    recs_a, recs_b = records_by_epoch(a), records_by_epoch(b)
    keys = {key for key, *_ in paired}
    scenarios = scenario_match(a, b)
    same_plan = scenarios["same"]
    return {
        "a": _describe(a),
        "b": _describe(b),
        "scenarios": scenarios,
        "variants": compare_snapshots(snap_a, snap_b, pairs),
        "epochs": {key: {"variant_a": va, "variant_b": vb, "epoch": ea.info.epoch, "label_a": ea.info.label,
                         "label_b": eb.info.label} for key, va, vb, ea, eb in paired},
        "unpaired": {"a": [v for v in a.variants if v not in {p[0] for p in pairs}],
                     "b": [v for v in b.variants if v not in {p[1] for p in pairs}]},
        "unpaired_epochs": {
            "a": [e.info.label for va, _ in pairs for e in snap_a.epochs.get(va, ())
                  if epoch_key(va, dict(pairs)[va], e.info.epoch) not in keys],
            "b": [e.info.label for va, vb in pairs for e in snap_b.epochs.get(vb, ())
                  if epoch_key(va, vb, e.info.epoch) not in keys],
        },
        "transitions": {"a": [t.as_dict() for t in snap_a.transitions], "b": [t.as_dict() for t in snap_b.transitions]},
        "outputs": {key: compare_outputs(recs_a.get((va, ea.info.epoch), []), recs_b.get((vb, eb.info.epoch), []),
                                         va, vb, same_plan=same_plan) for key, va, vb, ea, eb in paired},
        "warnings": [*a.warnings, *b.warnings],
    }


def scenario_match(a: Recording, b: Recording) -> dict[str, Any]:
    """Did both runs fire the same scenario? If not, outputs are matched by prompt, never by position."""
    name_a, name_b = a.manifest.get("scenario"), b.manifest.get("scenario")
    same = name_a == name_b
    note = "" if same else (f"different scenarios ({name_a!r} in A, {name_b!r} in B): latency and acceptance "
                            "tables compare unrelated traffic; outputs are matched only where the same prompt was sent")
    return {"a": name_a, "b": name_b, "same": same, "note": note}


def _describe(recording: Recording) -> dict[str, Any]:
    m = recording.manifest
    return {"path": str(recording.path), "lab": m.get("lab"), "scenario": m.get("scenario"),
            "pair": m.get("pair", {}), "simulated": recording.simulated, "status": m.get("status"),
            "duration_s": recording.duration, "records": len(recording.records),
            "time_scale": float(m.get("time_scale") or 1.0)}


def _fmt(value: float | None, scale: float = 1.0, digits: int = 1, pct: bool = False) -> str:
    if value is None:
        return "–"
    return f"{value * 100:.{digits}f}%" if pct else f"{value / scale:.{digits}f}"


def _fmt_delta(d: Mapping[str, Any], scale: float = 1.0, digits: int = 1, pct: bool = False) -> str:
    """``a → b (+delta)``; a rate's delta is in percentage points."""
    text = f"{_fmt(d['a'], scale, digits, pct)} → {_fmt(d['b'], scale, digits, pct)}"
    if d["delta"] is not None:
        sign = "+" if d["delta"] >= 0 else ""
        delta = f"{d['delta'] * 100:.{digits}f} pts" if pct else _fmt(d["delta"], scale, digits)
        text += f" ({sign}{delta})"
    return text


def _scale_note(side: Mapping[str, Any]) -> str:
    scale = side.get("time_scale") or 1.0
    return f", time scale {scale:g} (modelled time)" if scale != 1.0 else ""


def render_markdown(result: Mapping[str, Any]) -> str:
    a, b = result["a"], result["b"]
    lines = ["# speclab comparison", "",
             f"- A: `{a['path']}` — lab {a['lab']}, scenario {a['scenario']}, {a['records']} records, "
             f"{a['duration_s']:.1f} s{' (simulated)' if a['simulated'] else ''}{_scale_note(a)}",
             f"- B: `{b['path']}` — lab {b['lab']}, scenario {b['scenario']}, {b['records']} records, "
             f"{b['duration_s']:.1f} s{' (simulated)' if b['simulated'] else ''}{_scale_note(b)}",
             "", "Values are A → B (B − A). Latencies in ms, corrected for coordinated omission unless noted.", ""]
    labels = result.get("epochs") or {}
    if result.get("scenarios", {}).get("note"):
        lines += [f"> **{result['scenarios']['note']}**", ""]
    for variant, classes in result["variants"].items():
        meta = labels.get(variant) or {}
        both = variant
        if meta:
            both = meta["label_a"] if meta["label_a"] == meta["label_b"] else f"{meta['label_a']} → {meta['label_b']}"
        lines += [f"## {both}", "",
                  "| class | requests | e2e p50 | e2e p99 | TTFT p99 | queue p99 | prefill p99 | decode p99 "
                  "| accept len | rejection | verif/req | structured fail | out tok/s |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for cls, c in classes.items():
            lat = c["latency_us"]
            lines.append("| " + " | ".join([
                cls, _fmt_delta(c["requests"], digits=0),
                _fmt_delta(lat["e2e_corrected"]["p50"], 1000), _fmt_delta(lat["e2e_corrected"]["p99"], 1000),
                _fmt_delta(lat["ttft_corrected"]["p99"], 1000), _fmt_delta(lat["server_queue"]["p99"], 1000),
                _fmt_delta(lat["server_prefill"]["p99"], 1000), _fmt_delta(lat["server_decode"]["p99"], 1000),
                _fmt_delta(c["acceptance_length"], digits=2), _fmt_delta(c["rejection_rate"], pct=True),
                _fmt_delta(c["verifications_per_request"], digits=1),
                _fmt_delta(c["structured_failure_rate"], pct=True), _fmt_delta(c["output_tokens_per_s"]),
            ]) + " |")
        out = result["outputs"].get(variant)
        if out:
            lines += ["", f"Greedy output equality: {out['identical']} identical, {out['differing']} differing "
                      f"of {out['matched']} matched requests ({out['not_greedy']} not greedy, "
                      f"{out['unmatched_a']}/{out['unmatched_b']} unmatched in A/B)."]
            if out["first_differing_position_min"] is not None:
                lines.append(f"Earliest divergence at output token {out['first_differing_position_min']}.")
        lines.append("")
    unpaired = result.get("unpaired", {})
    if unpaired.get("a") or unpaired.get("b"):
        lines += [f"Variants only in A: {', '.join(unpaired['a']) or '–'}; only in B: {', '.join(unpaired['b']) or '–'}.", ""]
    lonely = result.get("unpaired_epochs", {})
    if lonely.get("a") or lonely.get("b"):
        lines += [f"Config epochs only in A: {', '.join(lonely['a']) or '–'}; only in B: {', '.join(lonely['b']) or '–'}.", ""]
    for warning in result.get("warnings", []):
        lines.append(f"> warning: {warning}")
    return "\n".join(lines).rstrip() + "\n"


def write_comparison(result: Mapping[str, Any], directory: Path) -> None:
    """``compare.json`` and ``compare.md`` in ``directory`` (created if needed); a failed write is an InputError."""
    directory = Path(directory)
    with writing(f"--report {directory}", "the comparison"):
        directory.mkdir(parents=True, exist_ok=True)
        write_json_atomic(directory / "compare.json", result)
        (directory / "compare.md").write_text(render_markdown(result), encoding="utf-8")

"""The recommended ``num_speculative_tokens_per_batch_size`` and the ``--speculative-config`` that carries it.

Chosen the way vLLM's own offline tuner chooses (``vllm bench sweep tune_speculative_k``): at each
measured batch size the k with the best median objective (output tokens/s by default), and among
the k's tied with it within noise the smallest; each measured batch size starts an inclusive range
that ends where the next begins, the last runs to ``max_num_seqs``, neighbours with the same k
merge, and the first range starts at 1. The batch size of a load level is the running batch its
chosen cell measured (``vllm:num_requests_running``), never the offered concurrency or rate: in
closed loop above ``max_num_seqs``, or open loop at any rate, the two differ.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from speclab.model.lab import Lab
from speclab.servers.argv import speculative_config as lab_speculative_config
from speclab.servers.backends import EngineId

from .cells import ALL, MEASURES
from .grid import CellConfig, LoadLevel
from .reduce import Groups, best_at, levels_of, primary_group
from .rules import Entry, normalize_schedule


@dataclass(frozen=True, slots=True)
class Recommendation:
    """The schedule, the evidence for each of its ranges, and what could not be used."""

    schedule: list[list[int]]
    num_speculative_tokens: int
    objective: str
    prompt_class: str
    evidence: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    group: tuple[Any, ...] | None = None

    @property
    def speculates(self) -> bool:
        return self.num_speculative_tokens > 0

    def config(self) -> CellConfig | None:
        """The schedule as a sweep arm (for the confirmation pass); None when it never speculates."""
        if not self.speculates:
            return None
        seqs, batched, chunked = self.group or (None, None, None)
        if len(self.schedule) == 1:
            return CellConfig(self.num_speculative_tokens, None, seqs, batched, chunked)
        return CellConfig(self.num_speculative_tokens, tuple((a, b, k) for a, b, k in self.schedule), seqs, batched, chunked)


def _level_choice(groups: Groups, level: LoadLevel, prompt_class: str, objective: str, tolerance: float,
                  min_requests: int, group: tuple[Any, ...]) -> dict[str, Any] | None:
    best = best_at(groups, level, prompt_class, objective, tolerance=tolerance, min_requests=min_requests, group=group)
    if best is None:
        return None
    chosen = groups[(best["config"], level)]
    running = {c.k: g.running_batch() for (c, lv), g in sorted(groups.items(), key=lambda kv: kv[0][0].k)
               if lv == level and c.fixed and c.group() == group}
    vs = best["vs_k0"]
    return {"load": level.value, "k": best["k"], "running_batch": chosen.running_batch(),
            "running_batch_by_k": running, "leader_k": best["leader_k"], "tied_with_leader": best["tied_with_leader"],
            "objective": {k: s.as_dict() for k, s in best["values"].items()},
            "vs_k0": None if vs is None else vs.as_dict(),
            "why": _why(best, objective)}


def _why(best: dict[str, Any], objective: str) -> str:
    label = MEASURES[objective].label
    vs = best["vs_k0"]
    tied = [k for k in best["tied_with_leader"] if k != best["k"]]
    if best["k"] == 0:
        if best["leader_k"] != 0:
            return f"k={best['leader_k']} led on {label} but within noise of k=0, so k=0"
        return f"no k beat k=0 on {label}"
    text = f"k={best['k']} beats k=0 on {label} ({vs.reason})" if vs is not None else f"k={best['k']} best on {label}"
    if tied:
        text += f"; tied within noise with k={', k='.join(map(str, tied))}, the smallest tied k is kept"
    return text


def recommend_schedule(groups: Groups, *, tolerance: float, min_requests: int, max_num_seqs: int | None,
                       objective: str = "throughput", prompt_class: str = ALL) -> Recommendation:
    """The schedule over the primary batch-settings group's fixed-k arms, with evidence per range."""
    group = primary_group(groups) or (None, None, None)
    notes: list[str] = []
    choices: list[dict[str, Any]] = []
    for level in levels_of(groups):
        choice = _level_choice(groups, level, prompt_class, objective, tolerance, min_requests, group)
        if choice is None:
            notes.append(f"load {level.label}: no fixed-k cell measured enough {prompt_class} requests; not used")
        elif choice["running_batch"] is None:
            notes.append(f"load {level.label}: no running batch measured (no server samples); not used")
        else:
            choices.append(choice)
    if not choices:
        return Recommendation([], 0, objective, prompt_class, [], [*notes, "no load level could be placed on a batch size"],
                              group)
    anchors: dict[int, dict[str, Any]] = {}
    for choice in sorted(choices, key=lambda c: (c["running_batch"], c["load"])):
        b = choice["running_batch"]
        if b in anchors:
            kept = anchors[b]
            if choice["k"] != kept["k"]:
                notes.append(f"loads {kept['load']:g} and {choice['load']:g} both ran a batch of {b}; "
                             f"they chose k={kept['k']} and k={choice['k']}, the smaller is kept")
            if choice["k"] < kept["k"]:
                earlier = [m for m in kept.pop("merged", [])]
                anchors[b] = {**choice, "merged": [kept, *earlier]}
            else:
                kept.setdefault("merged", []).append(choice)
            continue
        anchors[b] = choice
    points = sorted(anchors.items())
    top = max(max_num_seqs or 0, points[-1][0])
    ranges: list[list[Any]] = []
    for i, (b, choice) in enumerate(points):
        start = 1 if i == 0 else b
        end = points[i + 1][0] - 1 if i + 1 < len(points) else top
        if ranges and ranges[-1][2] == choice["k"]:
            ranges[-1][1] = end
            ranges[-1][3].append(choice)
        else:
            ranges.append([start, end, choice["k"], [choice]])
    if points[0][0] > 1:
        notes.append(f"batch sizes 1–{points[0][0] - 1} were not measured; they take the lowest level's k")
    schedule = [[int(a), int(b), int(k)] for a, b, k, _ in ranges]
    normalize_schedule(schedule, "schedule")  # the shape vLLM 0.33 accepts, or a bug here
    evidence = [{"range": [a, b], "k": k, "levels": [_level_evidence(c) for c in levels]} for a, b, k, levels in ranges]
    return Recommendation(schedule, max(k for _, _, k in schedule), objective, prompt_class, evidence, notes, group)


def _level_evidence(choice: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in choice.items() if k != "merged"}
    out["running_batch_by_k"] = {str(k): v for k, v in choice["running_batch_by_k"].items()}
    out["objective"] = {str(k): v for k, v in choice["objective"].items()}
    if choice.get("merged"):
        out["merged_levels"] = [m["load"] for m in choice["merged"]]
    return out


def dense_k(schedule: list[list[int]], batch: int) -> int:
    """The k the schedule gives a running batch of ``batch`` (gaps and the tail carry the previous k)."""
    k = 0
    for start, end, value in sorted(schedule):
        if start > batch:
            break
        k = value
        if batch <= end:
            break
    return k


def speculative_config(lab: Lab, rec: Recommendation) -> dict[str, Any] | None:
    """The ready ``--speculative-config`` (vLLM's names, the lab's real draft): the draft as the lab
    launches it, ``num_speculative_tokens`` = the largest scheduled k, and the schedule itself when
    it has more than one range (one range is a fixed k). None when the schedule never speculates."""
    if not rec.speculates or lab.draft is None:
        return None
    speculative = [v.name for v in lab.variants if v.speculative]
    base = lab_speculative_config(lab, lab.effective(speculative[0]), EngineId.VLLM) if speculative else None
    config: dict[str, Any] = dict(base) if base else {"method": lab.draft.method}
    if base is None and lab.draft.model and lab.draft.method not in ("ngram", "suffix"):
        config["model"] = lab.draft.model
    config["num_speculative_tokens"] = rec.num_speculative_tokens
    if len(rec.schedule) > 1:
        entries: list[Entry] = [(a, b, k) for a, b, k in rec.schedule]
        config["num_speculative_tokens_per_batch_size"] = [list(e) for e in entries]
    return config

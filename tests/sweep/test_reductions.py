"""Crossovers, ties, best k, the schedule, break-even, Pareto and confirmation on synthetic cells
whose answer is known in closed form (tests/sweep/synth.py)."""

from __future__ import annotations

import pytest

from speclab.model.lab import load_lab
from speclab.model.speculative import dense_schedule
from speclab.sweep import DraftRules, failed_cell, make_grid, reduce_sweep
from speclab.sweep.confirm import confirmation_configs
from speclab.sweep.grid import CellPlan
from speclab.sweep.noise import Spread, compare
from speclab.sweep.rules import normalize_schedule

from . import synth

LAB = load_lab("default")  # max_num_seqs 64
LADDER = [1, 8, 16, 32, 64]


def _grid(**kw: object):  # type: ignore[no-untyped-def]
    args = {"rules": DraftRules("draft_model"), "concurrency": LADDER, "repeats": 3, **kw}
    return make_grid([0, 2, 4], **args)  # type: ignore[arg-type]


def test_known_crossover_is_found_per_class_and_measure() -> None:
    grid = _grid()
    result = reduce_sweep(grid, synth.model_cells(grid), lab=LAB)
    # speed-up τ/(1 + A·k·b): k4 (τ 2.2) stops paying past b* = 15, k2 (τ 1.9) past b* = 22.5
    for prompt_class in ("all", *synth.CLASSES):
        assert result.crossover[prompt_class]["k4"] == {"tpot": 16, "throughput": 16}
        assert result.crossover[prompt_class]["k2"] == {"tpot": 32, "throughput": 32}
    detail = result.crossover_detail["all"]["k4"]["tpot"]
    assert detail["last_win"] == 8 and detail["wins_again_at"] == []
    assert [lv["verdict"] for lv in detail["levels"]] == ["win", "win", "loss", "loss", "loss"]


def test_no_crossover_reports_the_break_even_acceptance() -> None:
    grid = _grid(concurrency=[1, 2, 4])
    result = reduce_sweep(grid, synth.model_cells(grid), lab=LAB)
    assert result.crossover["all"]["k4"] == {"tpot": None, "throughput": None}
    none = {(r["arm"], r["measure"]): r for r in result.no_crossover() if r["class"] == "all"}
    row = none[("k4", "tpot")]
    assert row["top_load"] == 4
    # measured τ × TPOT_k / TPOT_0 is exactly the modelled step-time ratio 1 + A·k·b
    assert row["break_even"] == pytest.approx(1 + synth.A * 4 * 4, rel=1e-3)
    assert row["acceptance_length"] == pytest.approx(synth.TAU[4], abs=2e-3)
    assert none[("k2", "throughput")]["break_even"] == pytest.approx(1 + synth.A * 2 * 4, rel=1e-3)


def test_difference_within_the_repeats_spread_is_a_tie() -> None:
    wide = Spread.of([96.0, 100.0, 104.0])
    other = Spread.of([99.0, 103.0, 107.0])  # 3% better median, ranges overlap
    assert compare(other, wide, higher_is_better=True, tolerance=0.01).verdict == "tie"
    apart = Spread.of([110.0, 111.0, 112.0])
    assert compare(apart, wide, higher_is_better=True, tolerance=0.01).verdict == "win"
    assert compare(wide, apart, higher_is_better=True, tolerance=0.01).verdict == "loss"
    close = Spread.of([100.5])
    assert compare(close, Spread.of([100.0]), higher_is_better=True, tolerance=0.01).verdict == "tie"
    single = compare(Spread.of([103.0]), Spread.of([100.0]), higher_is_better=True, tolerance=0.01)
    assert single.verdict == "win" and "spread unmeasured" in single.reason
    # lower is better for latency
    assert compare(Spread.of([9.0, 9.1]), Spread.of([10.0, 10.1]), higher_is_better=False, tolerance=0.01).verdict == "win"


def test_noisy_repeats_make_a_small_crossover_a_tie_not_a_win() -> None:
    """At b=16 k4's loss is ~4%; ±6% repeat noise makes it a tie, which still ends k4's wins there."""
    grid = _grid()
    cells = [synth.model_cell(p, grid.slo, jitter=(0.94, 1.0, 1.06)[(p.repeat - 1) % 3]) for p in grid.cells()]
    result = reduce_sweep(grid, cells, lab=LAB)
    levels = result.crossover_detail["all"]["k4"]["throughput"]["levels"]
    assert levels[2]["verdict"] == "tie" and "spread" in levels[2]["reason"]
    assert result.crossover["all"]["k4"]["throughput"] == 16


def test_best_k_and_schedule_map_levels_to_measured_running_batches() -> None:
    grid = _grid()
    result = reduce_sweep(grid, synth.model_cells(grid), lab=LAB)
    # speed-ups: b=1 k4 2.04 > k2 1.83; b=8 k2 1.44 > k4 1.34; b=16 k2 1.16; b≥32 neither
    assert [r["throughput"] for r in result.best_k["all"]] == [4, 2, 2, 0, 0]
    assert result.recommendation.schedule == [[1, 7, 4], [8, 31, 2], [32, 64, 0]]
    normalize_schedule(result.recommendation.schedule, "schedule")
    dense = dense_schedule([tuple(e) for e in result.recommendation.schedule], 64, 4)
    assert dense[1] == 4 and dense[8] == 2 and dense[31] == 2 and dense[32] == 0 and dense[64] == 0
    ranges = result.recommendation.evidence
    assert [r["range"] for r in ranges] == [[1, 7], [8, 31], [32, 64]]
    assert ranges[1]["levels"][0]["running_batch"] == 8 and ranges[1]["levels"][0]["vs_k0"]["verdict"] == "win"
    config = result.speculative_config
    assert config == {"method": "draft_model", "model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 4,
                      "revision": "main", "num_speculative_tokens_per_batch_size": [[1, 7, 4], [8, 31, 2], [32, 64, 0]]}


def test_schedule_uses_the_running_batch_not_the_offered_load() -> None:
    """Above max_num_seqs the batch stops growing: concurrency 128 and 256 both ran 64."""
    grid = _grid(concurrency=[1, 8, 128, 256])
    plans = grid.cells()
    cells = [synth.model_cell(p, grid.slo, jitter=synth.JITTER[p.repeat - 1], batch=min(p.load.value, 64.0))
             for p in plans]
    result = reduce_sweep(grid, cells, lab=LAB)
    assert result.recommendation.schedule == [[1, 7, 4], [8, 63, 2], [64, 64, 0]]
    merged = result.recommendation.evidence[-1]["levels"][0]
    assert merged["running_batch"] == 64 and merged.get("merged_levels") == [256]
    assert any("above max_num_seqs 64" in n for n in result.notes)


def test_a_schedule_that_never_speculates_says_so() -> None:
    grid = _grid(concurrency=[32, 64])
    result = reduce_sweep(grid, synth.model_cells(grid), lab=LAB)
    assert result.recommendation.schedule == [[1, 64, 0]]
    assert result.speculative_config is None
    assert result.recommendation.config() is None


def test_failed_and_short_cells_are_never_compared() -> None:
    grid = _grid(min_requests=50)
    cells = synth.model_cells(grid)
    cells = [failed_cell(c.plan, "server k4 never became ready") if c.config.k == 4 and c.load.value == 16 else c
             for c in cells]
    result = reduce_sweep(grid, cells, lab=LAB)
    levels = result.crossover_detail["all"]["k4"]["tpot"]
    assert levels["skipped"] == [16] and levels["crossover"] == 32
    assert any("failed" in n for n in result.notes)
    # classes qa/code have 60 requests per cell; with a minimum of 100 they are unmeasured
    grid100 = _grid(min_requests=100)
    short = reduce_sweep(grid100, synth.model_cells(grid100), lab=LAB)
    assert short.crossover["qa"]["k4"] == {"tpot": None, "throughput": None}
    assert all(lv["verdict"] == "unmeasured" for lv in short.crossover_detail["qa"]["k4"]["tpot"]["levels"])
    assert short.crossover["all"]["k4"]["tpot"] == 16  # 'all' has 120 per cell


def test_pareto_front_per_arm() -> None:
    grid = _grid()
    result = reduce_sweep(grid, synth.model_cells(grid), lab=LAB)
    data = result.pareto["all"]
    assert set(data["arms"]) == {"k0", "k2", "k4"} and all(len(v) == 5 for v in data["arms"].values())
    front = data["front"]
    for p in front:  # nothing beats a front point on both axes
        assert not any(q["per_user_tps"] > p["per_user_tps"] and q["aggregate_tps"] > p["aggregate_tps"]
                       for curve in data["arms"].values() for q in curve)
    # the low-load end of the front is speculative, the high-load end the baseline
    assert front[0]["k"] > 0 and front[-1]["k"] == 0
    assert [p["aggregate_tps"] for p in front] == sorted(p["aggregate_tps"] for p in front)


def test_confirmation_pass_within_noise_and_where_not() -> None:
    grid = _grid()
    cells = synth.model_cells(grid)
    first = reduce_sweep(grid, cells, lab=LAB)
    schedule = first.recommendation.config()
    assert schedule is not None and schedule.schedule is not None
    assert first.best_fixed is not None and first.best_fixed.k == 2
    arms = confirmation_configs(schedule, first.best_fixed)
    assert [a.k for a in arms] == [0, 4, 2]

    def schedule_cell(plan: CellPlan, worse: float = 1.0):  # type: ignore[no-untyped-def]
        from speclab.sweep.schedule import dense_k

        k = dense_k(first.recommendation.schedule, int(plan.load.value))
        stand_in = CellPlan(type(plan.config)(k), plan.load, plan.repeat, plan.phase)
        cell = synth.model_cell(stand_in, grid.slo, jitter=synth.JITTER[plan.repeat - 1] * worse)
        return type(cell)(plan, cell.classes, cell.server, None, cell.source)

    confirm_plans = grid.cells("confirm", arms)
    fixed = [synth.model_cell(p, grid.slo, jitter=synth.JITTER[p.repeat - 1]) for p in confirm_plans
             if p.config.schedule is None]
    good = [schedule_cell(p) for p in confirm_plans if p.config.schedule is not None]
    result = reduce_sweep(grid, [*cells, *fixed, *good], lab=LAB)
    assert result.confirmation is not None and result.confirmation["within_noise_everywhere"] is True
    bad = [schedule_cell(p, worse=1.3 if p.load.value == 8 else 1.0) for p in confirm_plans if p.config.schedule is not None]
    worse = reduce_sweep(grid, [*cells, *fixed, *bad], lab=LAB)
    assert worse.confirmation is not None and worse.confirmation["within_noise_everywhere"] is False
    where = {(w["class"], w["measure"], w["load"]) for w in worse.confirmation["where_not"]}
    assert ("all", "tpot", 8) in where and ("all", "throughput", 8) in where
    assert all(w[2] == 8 for w in where)


def test_goodput_under_slos_from_records() -> None:
    """A request is good when it finished and met every per-request ceiling; errored ones never are."""
    from dataclasses import fields

    from speclab.model.records import RequestRecord
    from speclab.sweep import CellConfig, LoadLevel, cell_from_epoch, parse_slo

    has_epoch = "epoch" in {f.name for f in fields(RequestRecord)}
    slo = parse_slo("ttft_p99=200ms,tpot_p99=40ms")
    block = {"epoch": 2, "label": "k4·2 (k=2)", "settings": {}, "start_s": 0.0, "end_s": 10.0,
             "classes": {"all": synth.class_block(30.0, 500.0, requests=4), "qa": synth.class_block(30.0, 500.0, requests=4)}}
    for b in block["classes"].values():
        b["window_s"] = 10.0

    def rec(i: int, ttft: float, tpot: float, *, epoch: int = 2, error: str | None = None) -> RequestRecord:
        extra = {"epoch": epoch} if has_epoch else {}
        return RequestRecord(f"r{i}", "k4", "qa", intended=float(i), sent=float(i), first_token=i + ttft,
                             last_token=i + ttft + tpot * 9, done=i + ttft + tpot * 9 + 0.001, output_tokens=10,
                             error_kind=error, **extra)

    records = [rec(0, 0.1, 0.02), rec(1, 0.3, 0.02), rec(2, 0.1, 0.05), rec(3, 0.1, 0.02, error="http_5xx")]
    if has_epoch:
        records.append(rec(4, 0.1, 0.02, epoch=1))  # another epoch's request is not this cell's
    plan = CellPlan(CellConfig(2), LoadLevel("concurrency", 1))
    cell = cell_from_epoch(plan, block, variant="k4", slo=slo, records=records)
    good = cell.classes["qa"]["goodput"]
    assert good["source"] == "requests" and good["requests"] == 4 and good["good"] == 1
    assert good["requests_per_s"] == pytest.approx(0.1) and good["attainment"] == pytest.approx(0.25)
    # the block's percentiles: TTFT p99 60 ms within 200, TPOT p99 45 ms above 40
    assert good["slo_met"] is False
    none = cell_from_epoch(plan, block, variant="k4", slo=slo).classes["qa"]["goodput"]
    assert none["source"] == "not_measured" and none["requests_per_s"] is None


def test_speedups_are_the_modelled_ratios_with_the_repeats_range() -> None:
    grid = _grid()
    result = reduce_sweep(grid, synth.model_cells(grid), lab=LAB)
    for k in (2, 4):
        for measure in ("tpot", "throughput"):
            points = result.speedup["all"][f"k{k}"][measure]
            assert [p["load"] for p in points] == LADDER
            for p in points:
                expected = synth.TAU[k] / (1 + synth.A * k * p["load"])
                assert p["speedup"] == pytest.approx(expected, rel=1e-3)
                assert p["low"] < p["speedup"] < p["high"]  # ±0.4% jitter on each side


def test_a_first_batch_group_whose_servers_all_failed_does_not_blank_the_schedule() -> None:
    grid = _grid(max_num_seqs=[16, 64], repeats=1)
    cells = [failed_cell(p, "server did not start") if p.config.max_num_seqs == 16 else synth.model_cell(p, grid.slo)
             for p in grid.cells()]
    result = reduce_sweep(grid, cells, lab=LAB)
    assert result.recommendation.schedule == [[1, 7, 4], [8, 31, 2], [32, 64, 0]]
    assert result.best_fixed is not None and result.best_fixed.max_num_seqs == 64
    assert [r["throughput"] for r in result.best_k["all"]] == [4, 2, 2, 0, 0]
    arm = result.recommendation.config()
    assert arm is not None and arm.max_num_seqs == 64


def test_quick_confirmation_runs_the_schedule_alone_against_the_grids_fixed_cells() -> None:
    """``--quick``: only the schedule arm runs in the pass; k = 0 and the best fixed k are the grid's cells."""
    grid = _grid()
    cells = synth.model_cells(grid)
    first = reduce_sweep(grid, cells, lab=LAB, confirm_from_grid=True)
    schedule = first.recommendation.config()
    assert schedule is not None and schedule.schedule is not None and first.best_fixed is not None
    assert first.confirmation is not None and first.confirmation["within_noise_everywhere"] is False
    assert {r["reason"] for r in first.confirmation["unmeasured"]} == {"cell not run"}
    from speclab.sweep.schedule import dense_k

    alone = [a for a in confirmation_configs(schedule, first.best_fixed) if not a.fixed]
    assert alone == [schedule]
    runs = []
    for plan in grid.cells("confirm", alone):
        k = dense_k(first.recommendation.schedule, int(plan.load.value))
        cell = synth.model_cell(CellPlan(type(plan.config)(k), plan.load, plan.repeat, plan.phase), grid.slo,
                                jitter=synth.JITTER[plan.repeat - 1])
        runs.append(type(cell)(plan, cell.classes, cell.server, None, cell.source))
    result = reduce_sweep(grid, [*cells, *runs], lab=LAB, confirm_from_grid=True)
    assert result.confirmation is not None and result.confirmation["fixed_arms_from"] == "grid"
    assert result.confirmation["within_noise_everywhere"] is True and not result.confirmation["unmeasured"]
    full = reduce_sweep(grid, [*cells, *runs], lab=LAB).confirmation  # the full pass compares only its own cells
    assert full is not None and full["fixed_arms_from"] == "confirm" and full["levels"] == []

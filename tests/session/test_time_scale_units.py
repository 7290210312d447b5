"""The time-scale converter, the auto choice and the drift judge, in-process and without clocks."""

from __future__ import annotations

import pytest

from speclab.metrics.sim_drift import DriftJudge
from speclab.model.errors import InputError
from speclab.model.lab import load_lab
from speclab.model.records import RequestRecord, ServerSample
from speclab.model.scenario import load_scenario
from speclab.model.time_scale import HOST_CAPACITY_SEQS, SimLoad, TimeScale, auto_time_scale, parse_time_scale
from speclab.session.time_scale import planned_loads, resolve_time_scale
from speclab.traffic.schedule import build_plan
from speclab.traffic.wall_plan import wall_plan


def _record(t0: float) -> RequestRecord:
    rec = RequestRecord(request_id="r", variant="k4", prompt_class="qa", intended=t0, sent=t0 + 0.002)
    rec.first_token, rec.last_token, rec.done = t0 + 0.1, t0 + 0.5, t0 + 0.5
    rec.output_tokens, rec.server_decode_ms = 5, 200.0
    return rec


def test_parse_takes_auto_and_numbers_at_least_one() -> None:
    assert parse_time_scale("auto") is None and parse_time_scale(None) is None and parse_time_scale(" AUTO ") is None
    assert parse_time_scale("2.5") == 2.5 and parse_time_scale("1") == 1.0
    for bad in ("0.5", "0", "-2", "inf", "nan", "fast"):
        with pytest.raises(InputError, match="--time-scale"):
            parse_time_scale(bad)


def test_ingest_divides_every_client_timestamp_once_and_leaves_server_figures() -> None:
    wall = _record(4.0)
    (rec,) = TimeScale(2.0).ingest([_record(4.0)])
    assert rec.intended == 2.0 and rec.sent == pytest.approx(2.001) and rec.done == pytest.approx(2.25)
    assert rec.first_token == pytest.approx(2.05) and rec.last_token == pytest.approx(2.25)
    assert rec.tpot == pytest.approx(wall.tpot / 2)  # a duration read in modelled seconds
    assert rec.server_decode_ms == 200.0  # the simulator's own figure is modelled already
    same = _record(4.0)
    assert TimeScale(1.0).ingest([same])[0].done == 4.5


def test_wall_plan_stretches_the_schedule_and_timeouts_but_not_counts() -> None:
    plan = build_plan(load_scenario("mixed"), duration_s=10.0)
    wall = wall_plan(plan, 3.0)
    assert wall.duration_s == 30.0 and wall.warmup_s == plan.warmup_s * 3
    assert wall.stall_timeout_s == plan.stall_timeout_s * 3 and wall.request_timeout_s == plan.request_timeout_s * 3
    assert plan.time_scale == 1.0 and wall.time_scale == 3.0  # what error messages divide the timeouts by
    modelled, stretched = plan.offsets(), wall.offsets()
    assert len(modelled) == len(stretched) > 10
    assert [t * 3 for t, _ in modelled] == pytest.approx([t for t, _ in stretched])
    assert [r.request_id for _, r in modelled] == [r.request_id for _, r in stretched]
    closed = build_plan(load_scenario("mixed"), duration_s=5.0, concurrency=8)
    assert wall_plan(closed, 2.0).concurrency_steps == ((0.0, 8),)


def test_auto_is_one_for_light_runs_and_grows_with_running_sequences_and_k() -> None:
    lab = load_lab("default")
    smoke = build_plan(load_scenario("smoke"))
    assert resolve_time_scale(None, engine="sim", lab=lab, variants=lab.variant_names, plan=smoke).s == 1.0
    mixed = build_plan(load_scenario("mixed"))
    assert resolve_time_scale(None, engine="sim", lab=lab, variants=lab.variant_names, plan=mixed).s == 1.0
    heavy = build_plan(load_scenario("mixed"), concurrency=96)
    loads = planned_loads(lab, lab.variant_names, heavy)
    assert [(x.running, x.num_speculative_tokens) for x in loads] == [(64, 0), (64, 2), (64, 4)]  # max_num_seqs caps
    chosen = resolve_time_scale(None, engine="sim", lab=lab, variants=lab.variant_names, plan=heavy)
    assert chosen.s > 1.0 and chosen.s * 2 == int(chosen.s * 2) and "auto" in chosen.reason
    demand = sum(x.weight for x in loads)
    assert (chosen.s - 0.5) * HOST_CAPACITY_SEQS < demand <= chosen.s * HOST_CAPACITY_SEQS  # the smallest that fits
    alone = resolve_time_scale(None, engine="sim", lab=lab, variants=lab.variant_names, plan=heavy, sequential=True)
    assert alone.s < chosen.s  # one simulator at a time carries less
    assert auto_time_scale([SimLoad("a", 1.0, 4)])[0] == 1.0


def test_a_scale_for_a_real_or_attached_server_is_bad_input_and_a_given_one_is_kept() -> None:
    lab = load_lab("default")
    plan = build_plan(load_scenario("smoke"))
    with pytest.raises(InputError, match="simulator only"):
        resolve_time_scale(2.0, engine="vllm", lab=lab, variants=lab.variant_names, plan=plan)
    with pytest.raises(InputError, match="starts no simulator"):
        resolve_time_scale(2.0, engine=None, lab=None, variants=("a",), plan=plan)
    assert resolve_time_scale(None, engine="vllm", lab=lab, variants=lab.variant_names, plan=plan).s == 1.0
    assert resolve_time_scale(3.0, engine="sim", lab=lab, variants=lab.variant_names, plan=plan).s == 3.0


def _sample(t: float, drift: float, steps: float = 100, step_s: float = 0.5, variant: str = "k4") -> ServerSample:
    return ServerSample(t=t, variant=variant, clock_drift_s=drift, sim_steps=steps, sim_step_s=step_s,
                        sim_drift_s=drift * steps)


def test_drift_over_a_tenth_of_the_modelled_step_flags_the_interval_and_suggests_a_scale() -> None:
    judge = DriftJudge()
    assert judge.add(_sample(1.0, 0.0001)) is None  # 0.1 ms against a 5 ms step: kept
    line = judge.add(_sample(2.0, 0.002))  # 2 ms: trailing
    assert line is not None and "k4" in line and "5.0 ms" in line
    assert judge.add(_sample(3.0, 0.003)) is None  # the same episode: flagged, no second line
    judge.add(_sample(4.0, 0.0, steps=0, step_s=0.0))  # idle: not judged
    (verdict,) = judge.verdicts()
    assert verdict.trailing == (2, 3) and verdict.intervals == 3
    assert verdict.step_mean_s == pytest.approx(0.005)
    assert judge.trailing() == {"k4": [2, 3]}
    assert judge.fit(1.0) >= 1.5
    assert not verdict.fell_behind  # under a step and not growing: flagged, but the run stays valid


def test_a_drift_that_keeps_growing_is_trailing_and_needs_a_scale_for_its_growth() -> None:
    judge = DriftJudge()
    for i in range(10):
        judge.add(_sample(float(i), 0.5 * i, variant="baseline"))  # half a modelled second lost per second
    (verdict,) = judge.verdicts()
    assert len(verdict.trailing) == 9 and verdict.growth == pytest.approx(0.5) and verdict.fell_behind
    assert judge.fit(2.0) >= 3.0  # 2 x 1.5, and some to spare

"""The grid as a validated model: what it expands to, and bad input named by its field."""

from __future__ import annotations

from typing import Any

import pytest

from speclab.model.errors import InputError
from speclab.model.exit_codes import ExitCode
from speclab.model.lab import load_lab
from speclab.model.speculative import dense_schedule
from speclab.sweep import (
    DraftRules,
    Grid,
    make_grid,
    parse_list,
    parse_schedule,
    parse_slo,
    rules_for_lab,
    schedule_option,
)
from speclab.sweep.rules import normalize_schedule

DRAFT = DraftRules("draft_model")


def test_grid_expands_configs_times_ladder_and_always_has_the_baseline() -> None:
    grid = make_grid([4, 2], rules=DRAFT, max_num_seqs=[64, 256], concurrency=[8, 1, 32], repeats=2)
    assert [c.k for c in grid.configs] == [0, 2, 4, 0, 2, 4]
    assert [lv.value for lv in grid.load] == [1, 8, 32]
    plans = grid.cells()
    assert len(plans) == 6 * 3 * 2
    assert len({p.id for p in plans}) == len(plans)
    assert plans[0].config.k == 0 and plans[0].repeat == 1 and plans[-1].repeat == 2
    assert grid.varying() == ("max_num_seqs",)
    assert plans[0].config.arm(grid.varying()) == "k0 seqs=64"
    assert plans[0].id == "k0-seqs64_c1_r1"


def test_schedule_arms_and_options_parse() -> None:
    sched = parse_schedule("1-16:4,17-64:2,65-256:0", "--schedule")
    grid = make_grid(parse_list("0,2,4", "--k"), rules=DRAFT, schedules=[sched], chunked_prefill=parse_list("on,off", "--chunked-prefill", bool),
                     rate=parse_list("0.5,2", "--rate", float), slo="ttft_p99=200ms,tpot_p99=0.04s")
    arms = [c for c in grid.configs if c.schedule is not None]
    assert len(arms) == 2 and arms[0].k == 4 and arms[0].schedule == ((1, 16, 4), (17, 64, 2), (65, 256, 0))
    assert arms[0].settings()["num_speculative_tokens_per_batch_size"] == [[1, 16, 4], [17, 64, 2], [65, 256, 0]]
    assert grid.mode == "rate" and grid.load[0].key == "r0.5"
    assert grid.slo.as_dict() == {"ttft_p99": 200.0, "tpot_p99": 40.0}
    assert grid.as_dict() == type(grid).from_dict(grid.as_dict()).as_dict()


def test_lab_rules_and_notes() -> None:
    lab = load_lab("default")
    rules = rules_for_lab(lab)
    assert rules.method == "draft_model"
    grid = make_grid([2, 4], rules=rules, concurrency=[1, 8, 256])
    assert any("above max_num_seqs 64" in n for n in grid.notes(lab.effective(lab.baseline).max_num_seqs))


@pytest.mark.parametrize(("kwargs", "field", "words"), [
    ({"k": []}, "--k:", "empty"),
    ({"k": [0]}, "--k:", "only k=0"),
    ({"k": [2, 2]}, "--k:", "twice"),
    ({"k": [-1]}, "--k: k=-1", "negative"),
    ({"k": [65]}, "--k: k=65", "limit"),
    ({"k": [2], "concurrency": []}, "--concurrency:", "empty"),
    ({"k": [2], "concurrency": [1, 0]}, "--concurrency: 0", "at least 1"),
    ({"k": [2], "concurrency": [-4]}, "--concurrency: -4", "not a load level"),
    ({"k": [2], "rate": [0.0]}, "--rate: 0", "above 0"),
    ({"k": [2], "rate": [-1.5]}, "--rate: -1.5", "above 0"),
    ({"k": [2], "rate": [float("inf")]}, "--rate: inf", "not a rate"),
    ({"k": [2], "rate": [1.0], "concurrency": [1]}, "--concurrency, --rate:", "not both"),
    ({"k": [2], "repeats": 0}, "--repeats:", "out of range"),
    ({"k": [2], "warmup_s": -1.0}, "--warmup:", "0 s or more"),
    ({"k": [2], "min_requests": 0}, "--min-requests:", "out of range"),
    ({"k": [2], "max_num_seqs": [0]}, "--max-num-seqs: 0", "out of range"),
    ({"k": [2], "slo": "ttfb_p99=200ms"}, "--slo:", "unknown key 'ttfb_p99'"),
    ({"k": [2], "slo": "ttft_p99=fast"}, "--slo:", "not a duration"),
    ({"k": [2], "slo": "ttft_p99=0ms"}, "--slo:", "positive"),
    ({"k": [2], "schedules": [[[2, 8, 4]]]}, "--schedule:", "start at 1"),
    ({"k": [2], "schedules": [[[1, 8, 4], [8, 16, 2]]]}, "--schedule:", "overlap"),
    ({"k": [2], "schedules": [[[1, 8, -1]]]}, "--schedule[0]:", ">= 0"),
    ({"k": [2], "schedules": [[[1, 8, 0]]]}, "--schedule:", "baseline"),
    ({"k": [2], "schedules": [[[1, 8]]]}, "--schedule[0]:", "3-item sequence"),
])
def test_bad_grid_names_the_field(kwargs: dict[str, Any], field: str, words: str) -> None:
    args = {**({} if "rate" in kwargs else {"concurrency": [1, 8]}), **kwargs}
    ks = args.pop("k")
    with pytest.raises(InputError) as info:
        make_grid(ks, rules=DRAFT, **args)
    message = str(info.value)
    assert message.startswith(field), message
    assert words in message, message
    assert info.value.exit_code == ExitCode.BAD_INPUT
    assert "\n" not in message


@pytest.mark.parametrize(("rules", "k", "words"), [
    (DraftRules(None), 2, "no [draft]"),
    (DraftRules("mtp", n_predict=2), 3, "divisible by n_predict=2"),
    (DraftRules("suffix", suffix_max_tree_depth=8), 9, "suffix_decoding_max_tree_depth=8"),
    (DraftRules("draft_model", rejection_sample_method="fly"), 1, "FLy requires num_speculative_tokens to be at least 2"),
    (DraftRules("eagle3", rejection_sample_method="fly", fly_window_size=4), 4, "fly_window_size"),
])
def test_a_k_the_method_cannot_take(rules: DraftRules, k: int, words: str) -> None:
    with pytest.raises(InputError, match=rf"^--k: k={k}[: ]") as info:
        make_grid([0, k], rules=rules, concurrency=[1])
    assert words in str(info.value)


def arms(grid: Grid) -> list[tuple[int, tuple[tuple[int, int, int], ...] | None]]:
    return [(c.k, c.schedule) for c in grid.configs]


@pytest.mark.parametrize(("k", "rules", "schedules", "expected"), [
    # MTP: a multiple of n_predict, or at most n_predict (vLLM only checks divisibility above it).
    ([2, 4], DraftRules("mtp", n_predict=2), [], [(0, None), (2, None), (4, None)]),
    ([1], DraftRules("mtp", n_predict=2), [], [(0, None), (1, None)]),
    # A schedule arm runs with num_speculative_tokens = its largest k, after the fixed-k arms.
    ([2, 6], DraftRules("ngram"), [[[1, 8, 6], [9, 64, 0]]],
     [(0, None), (2, None), (6, None), (6, ((1, 8, 6), (9, 64, 0)))]),
    ([3], DraftRules("draft_model", rejection_sample_method="fly"), [], [(0, None), (3, None)]),
])
def test_method_rules_that_pass(k: list[int], rules: DraftRules, schedules: list[object],
                                expected: list[tuple[int, tuple[tuple[int, int, int], ...] | None]]) -> None:
    grid = make_grid(k, rules=rules, concurrency=[1], schedules=schedules)
    assert arms(grid) == expected  # the baseline k=0 first, added though not asked for
    assert grid.rules == rules
    assert [(level.mode, level.value) for level in grid.load] == [("concurrency", 1)]


def test_schedule_refused_where_vllm_would_drop_it() -> None:
    with pytest.raises(InputError, match=r"^--schedule: vLLM 0.33 ignores") as info:
        make_grid([2], rules=DraftRules("suffix"), concurrency=[1], schedules=[[[1, 8, 4], [9, 64, 2]]])
    assert "'suffix'" in str(info.value)


def test_parsers_name_the_field() -> None:
    with pytest.raises(InputError, match=r"^--k: 'x' is not a number"):
        parse_list("2,x", "--k")
    with pytest.raises(InputError, match=r"^--concurrency: '1.5' is not a whole number"):
        parse_list("1.5", "--concurrency")
    with pytest.raises(InputError, match=r"^--chunked-prefill: 'maybe' is not on/off"):
        parse_list("maybe", "--chunked-prefill", bool)
    with pytest.raises(InputError, match=r"^--schedule #2\[1\]: '9-64' is not START-END:K"):
        parse_schedule("1-8:4,9-64", schedule_option(1, 2))
    with pytest.raises(InputError, match=r"^--slo: ttft_p99 is given twice"):
        parse_slo("ttft_p99=1ms,ttft_p99=2ms")
    assert parse_slo("e2e_p50=1.5s,tpot_p90=250us").as_dict() == {"e2e_p50": 1500.0, "tpot_p90": 0.25}
    assert not parse_slo("")


def test_dense_lookup_carries_gaps_and_clamps_like_vllm() -> None:
    entries = normalize_schedule([[32, 128, 2], [1, 16, 3]], "s")
    dense = dense_schedule(entries, 160, 3)
    assert dense[1] == dense[16] == 3 and dense[17] == dense[31] == 3  # the gap inherits k=3
    assert dense[32] == dense[128] == 2 and dense[160] == 2  # the tail carries the last k
    assert dense_schedule([(1, 8, 5)], 8, 3)[8] == 3  # clamped to num_speculative_tokens

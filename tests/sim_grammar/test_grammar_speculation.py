"""Speculated runs, verification masks and rollback, against a reference that steps one mask at a time."""

from __future__ import annotations

import numpy as np
import pytest

from speclab.sim.grammar import (
    GrammarError,
    GrammarMatcher,
    GrammarSpec,
    apply_mask,
    spec_from_request,
    unpack_bitmask,
)

from .cases import Case, all_cases, compiler, sample, spec_of, tokenizer

CASES = all_cases()


def _path(case: Case, seed: int) -> list[int]:
    return sample(compiler().compile(spec_of(case)), np.random.default_rng(seed))


def _at(case: Case, prefix: list[int]) -> GrammarMatcher:
    matcher = compiler().compile(spec_of(case))
    assert matcher.accept(prefix)
    return matcher


def _reference_prefix(case: Case, prefix: list[int], run: list[int]) -> int:
    """How many of ``run`` the grammar takes after ``prefix``, one mask at a time (vLLM's rules)."""
    matcher = _at(case, prefix)
    if matcher.is_stopped():
        return 0
    taken = 0
    for token in run:
        if token < 0 or not matcher.mask()[token]:
            break
        matcher.accept([token])
        taken += 1
        if matcher.is_terminated():
            break
    return taken


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_validate_takes_exactly_the_longest_valid_prefix(case: Case) -> None:
    rng = np.random.default_rng(7)
    vocab = tokenizer().vocab_size
    for seed in range(4):
        path = _path(case, seed)
        for _ in range(6):
            start = int(rng.integers(0, len(path)))
            keep = int(rng.integers(0, 6))
            garbage = [int(t) for t in rng.integers(0, vocab, size=3)]
            run = path[start: start + keep] + garbage
            if rng.random() < 0.2:
                run = [*path[start:start + keep], -1, *path[start + keep:]]
            matcher = _at(case, path[:start])
            before = matcher.mask()
            assert matcher.validate(run) == _reference_prefix(case, path[:start], run), (case.name, start, run)
            assert np.array_equal(matcher.mask(), before) and matcher.num_tokens == start  # validate never advances
        end = _at(case, path[:-1])
        assert end.validate(path[-1:] * 2) == (0 if end.is_stopped() else 1)  # an EOS, never what follows it


@pytest.mark.parametrize("case", CASES[::3], ids=lambda c: c.name)
def test_validate_after_the_value_is_complete_takes_nothing(case: Case) -> None:
    path = _path(case, 1)
    matcher = _at(case, path[:-1])
    if matcher.is_stopped():
        assert matcher.validate([path[-1]]) == 0  # vLLM strips even an EOS draft once stopped
    assert _at(case, path).validate([0, 1, 2]) == 0


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_verification_masks_are_the_masks_along_the_drafts(case: Case) -> None:
    rng = np.random.default_rng(11)
    for seed in range(3):
        path = _path(case, seed)
        start = int(rng.integers(0, len(path)))
        drafts = path[start: start + 5]
        matcher = _at(case, path[:start])
        before = matcher.mask()
        rows = matcher.verification_masks(drafts)
        assert rows.shape == (len(drafts) + 1, matcher.vocab_size)
        for i in range(len(drafts) + 1):
            expected = _at(case, path[: start + i]).mask()
            assert np.array_equal(rows[i], expected), (case.name, start, i)
        assert np.array_equal(matcher.mask(), before) and matcher.num_tokens == start
        assert not matcher.is_terminated()
        assert matcher.accept(path[start:]) and matcher.is_terminated()


def test_verification_masks_freeze_after_a_refused_draft() -> None:
    case = CASES[0]
    path = _path(case, 0)
    matcher = _at(case, path[:3])
    bad = next(t for t in range(matcher.vocab_size) if not matcher.mask()[t])
    rows = matcher.verification_masks([path[3], bad, path[4]])
    assert np.array_equal(rows[1], _at(case, path[:4]).mask())
    assert np.array_equal(rows[2], rows[1]) and np.array_equal(rows[3], rows[1])
    assert matcher.error == "" and matcher.num_tokens == 3


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_rollback_restores_the_state(case: Case) -> None:
    rng = np.random.default_rng(5)
    path = _path(case, 2)
    for _ in range(4):
        start = int(rng.integers(0, len(path)))
        matcher = _at(case, path[:start])
        before = (matcher.mask(), matcher.is_accepting(), matcher.is_stopped())
        n = int(rng.integers(1, len(path) - start + 1))
        assert matcher.accept(path[start: start + n])
        matcher.rollback(n)
        assert (np.array_equal(matcher.mask(), before[0]), matcher.is_accepting(), matcher.is_stopped()) == \
            (True, before[1], before[2])
        assert not matcher.is_terminated() and matcher.num_tokens == start
        assert matcher.accept(path[start:]) and matcher.is_terminated()  # and it goes on as before


def test_rollback_past_the_start_is_refused() -> None:
    matcher = _at(CASES[0], [])
    with pytest.raises(ValueError, match="cannot roll back 1 of 0"):
        matcher.rollback(1)


def test_after_eos_the_mask_is_open_and_tokens_pass_unchecked() -> None:
    """vLLM's terminated grammar: with ignore_eos the answer goes on unconstrained after the value."""
    tok = tokenizer()
    path = _path(CASES[0], 0)
    matcher = _at(CASES[0], path)
    assert matcher.is_terminated() and matcher.mask().all()
    garbage = tok.encode("   trailing text")
    assert matcher.accept(garbage) and matcher.num_tokens == len(path) + len(garbage)
    matcher.rollback(len(garbage) + 1)
    assert not matcher.is_terminated() and matcher.is_stopped()
    assert np.flatnonzero(matcher.mask()).tolist() == [tok.eos_token_id]


def test_a_refused_token_leaves_the_matcher_in_error() -> None:
    tok = tokenizer()
    matcher = _at(CASES[0], [])
    assert not matcher.accept(tok.encode("hello"))
    assert matcher.error and matcher.is_stopped()


def test_masks_constrain_a_distribution() -> None:
    tok = tokenizer()
    matcher = compiler().compile(spec_from_request({"structured_outputs": {"choice": ["yes", "no"]}}, chat=True)
                                 or pytest.fail("no spec"))
    mask = matcher.mask()
    p = apply_mask(np.full(tok.vocab_size, 1.0 / tok.vocab_size), mask)
    assert set(np.flatnonzero(p)) == set(np.flatnonzero(mask)) and 0 < mask.sum() < 10
    zero = apply_mask(np.zeros(tok.vocab_size), mask)
    assert np.array_equal(zero > 0, mask)  # a distribution with no mass left on the mask: uniform over it
    assert np.array_equal(unpack_bitmask(matcher.bitmask(), tok.vocab_size), mask)
    with pytest.raises(ValueError, match="contiguous int32"):
        matcher.fill_bitmask(np.zeros(3, np.int32))


def test_an_invalid_grammar_raises_on_compile() -> None:
    with pytest.raises(GrammarError, match=r"^Grammar error: "):
        compiler().compile(GrammarSpec("regex", "(a", "structured_outputs"))
    with pytest.raises(GrammarError, match=r"^Invalid grammar specification: "):
        compiler().compile(GrammarSpec("json", "{oops", "structured_outputs"))

"""The correctness stages of `speclab accept`: tokenizer alignment, golden set, equivalence, structured.

Each function gathers the records its gate needs from the running servers and hands them to the
pure evaluation in ``speclab.gates``; nothing here judges a response itself.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

from speclab.gates.equivalence import Decode, evaluate_equivalence
from speclab.gates.equivalence_real import comparison_mode, logprob_request
from speclab.gates.golden import GoldenCase, evaluate_golden
from speclab.gates.result import StageResult
from speclab.gates.stages import STRUCTURED, TOKENIZER_ALIGNMENT
from speclab.gates.structured import FallbackLedger, evaluate_structured
from speclab.gates.tokenizer_alignment import alignment_result, compare_tokenizers
from speclab.model.lab import HEAD_METHODS, Lab
from speclab.model.records import RequestRecord
from speclab.servers.pairing import SIM_MODELS_DIR, tokenizer_file
from speclab.traffic.schedule import PlannedRequest, build_plan

from .accept_context import AcceptContext, case_request, planned

# Open-ended continuations whose first few output tokens carry real sampling freedom, so a
# homogeneity test over the first tokens has power (measured on the simulator: these two separate
# a temperature drift of x0.6 at 400 samples, where factual and refusal cases stay deterministic).
DISTRIBUTION_CASE_ORDER = ("long_continuation-02", "long_continuation-01", "long_continuation-00")
DISTRIBUTION_SEED_STRIDE = 1_000_003


def tokenizer_dirs(lab: Lab, simulated: bool) -> tuple[Path, Path] | str:
    """(target dir, draft dir) to compare, or the reason there is nothing to compare."""
    draft = lab.draft
    if draft is None or not draft.model:
        method = draft.method if draft else "none"
        return f"no separate draft checkpoint (method {method}): nothing to align"
    if draft.method in HEAD_METHODS:
        return f"method {draft.method} drafts with a head over the target's own vocabulary: nothing to align"
    if simulated:
        if not draft.sim_model:
            return "the draft has no simulator stand-in (draft.sim_model)"
        return SIM_MODELS_DIR / lab.target.sim_model, SIM_MODELS_DIR / draft.sim_model
    if not lab.target.tokenizer or not draft.tokenizer:
        return "vLLM: the lab names no local tokenizer paths (target.tokenizer and draft.tokenizer); alignment not checked"
    dirs: list[Path] = []
    for role, local in (("target", lab.target.tokenizer), ("draft", draft.tokenizer)):
        found = tokenizer_file(local)
        if found is None:
            return f"vLLM: {role}.tokenizer {local!r} has no tokenizer.json; alignment not checked"
        dirs.append(found.parent)
    return dirs[0], dirs[1]


def tokenizer_stage(ctx: AcceptContext) -> StageResult:
    dirs = tokenizer_dirs(ctx.lab, ctx.engine.simulated)
    if isinstance(dirs, str):
        return StageResult.skip(TOKENIZER_ALIGNMENT, dirs)
    report = compare_tokenizers(*dirs)
    result = alignment_result(report, forced=ctx.force)
    ctx.misaligned = not report.aligned and not ctx.force
    return result


async def golden_stage(ctx: AcceptContext) -> StageResult:
    responses = await ctx.golden()
    return evaluate_golden(ctx.golden_cases, responses, ctx.baseline, ctx.profile.golden)


def _decoder(ctx: AcceptContext) -> Decode | None:
    """Token ids -> text with the target's tokenizer, where it is at hand, for readable differences."""
    dirs = tokenizer_dirs(ctx.lab, ctx.engine.simulated)
    path = tokenizer_file(dirs[0]) if not isinstance(dirs, str) else None
    if path is None:
        return None
    tokenizer = Tokenizer.from_file(str(path))
    return lambda ids: tokenizer.decode(list(ids), skip_special_tokens=False)


def distribution_cases(cases: list[GoldenCase], count: int) -> list[GoldenCase]:
    by_id = {c.id: c for c in cases}
    first = [by_id[i] for i in DISTRIBUTION_CASE_ORDER if i in by_id]
    rest = sorted((c for c in cases if c.id not in DISTRIBUTION_CASE_ORDER),
                  key=lambda c: (c.check.kind != "baseline_equal", c.id))
    return (first + rest)[:count]


async def _greedy_with_logprobs(ctx: AcceptContext) -> tuple[dict[str, dict[str, RequestRecord]],
                                                              dict[str, RequestRecord]]:
    """The golden cases greedily with logprobs: every variant as usual, and the baseline once more
    one request at a time (the noise floor's other batch size)."""
    def requests(tag: str, variant: str) -> list[PlannedRequest]:
        out = []
        for case in ctx.golden_cases:
            endpoint = "chat" if case.messages is not None else "completions"
            sampling = {"max_tokens": case.max_tokens or 64, "temperature": 0.0, "seed": ctx.seed,
                        **logprob_request(endpoint)}
            out.append(case_request(case, f"{tag}-{variant}-{case.id}", sampling))
        return out

    together = await ctx.send({v: requests("greedy-lp", v) for v in ctx.variants}, in_flight=len(ctx.golden_cases))
    alone = await ctx.send({ctx.baseline: requests("greedy-lp1", ctx.baseline)}, in_flight=1)
    by_case = {v: {c.id: r for c, r in zip(ctx.golden_cases, recs, strict=True)} for v, recs in together.items()}
    noise = dict(by_case[ctx.baseline])
    by_case[ctx.baseline] = {c.id: r for c, r in zip(ctx.golden_cases, alone[ctx.baseline], strict=True)}
    return by_case, noise


async def equivalence_stage(ctx: AcceptContext) -> StageResult:
    settings = ctx.profile.equivalence
    comparison = comparison_mode(settings.comparison, simulated=ctx.engine.simulated,
                                 server_envs=[ctx.lab.effective(v).env for v in ctx.variants])
    lossy = {v: note for v in ctx.variants if (note := ctx.lab.variant(v).lossy_note)}
    greedy: dict[str, dict[str, RequestRecord]] | None = None
    noise: dict[str, RequestRecord] | None = None
    if settings.greedy and comparison[0] == "tolerance":
        greedy, noise = await _greedy_with_logprobs(ctx)
    elif settings.greedy:
        greedy = await ctx.golden()
    sampled: dict[str, dict[str, list[RequestRecord]]] | None = None
    if settings.distribution:
        cases = distribution_cases(ctx.golden_cases, settings.prompts)
        requests: dict[str, list[PlannedRequest]] = {v: [] for v in ctx.variants}
        for case in cases:
            for i in range(settings.samples):
                sampling = {"max_tokens": settings.first_tokens, "temperature": settings.temperature,
                            "top_p": settings.top_p, "seed": ctx.seed * DISTRIBUTION_SEED_STRIDE + i}
                for v in ctx.variants:
                    requests[v].append(case_request(case, f"dist-{v}-{case.id}-{i}", sampling))
        sent = await ctx.send(requests, in_flight=32)
        sampled = {v: {} for v in sent}
        for v, records in sent.items():
            for case in cases:
                sampled[v][case.id] = [r for r in records if r.request_id.startswith(f"dist-{v}-{case.id}-")]
    result = evaluate_equivalence(settings, ctx.baseline, greedy=greedy, sampled=sampled, decode=_decoder(ctx),
                                  lossy=lossy, comparison=comparison, noise=noise)
    if sampled is not None:
        result.metrics["distribution_prompts"] = list(next(iter(sampled.values())).keys())
        result.metrics["samples_per_arm"] = settings.samples
    return result


def structured_requests(ctx: AcceptContext) -> list[PlannedRequest]:
    """``requests_per_class`` schema-constrained requests per canary class that carries a schema."""
    plan = build_plan(ctx.canary_scenario, requests=1, seed=ctx.seed)
    out: list[PlannedRequest] = []
    per_class = ctx.profile.structured.requests_per_class
    for cls in plan.classes:
        items = [item for item in cls.items if item.get("schema") is not None]
        for i in range(per_class if items else 0):
            item = items[i % len(items)]
            sampling = dict(cls.sampling)
            sampling.setdefault("max_tokens", item.get("max_tokens") or 64)
            sampling.setdefault("temperature", 0.0)
            sampling["seed"] = ctx.seed + i
            messages = item.get("messages")
            prompt = item.get("prompt")
            if cls.endpoint == "chat" and messages is None:
                messages = [{"role": "user", "content": prompt or ""}]
            out.append(planned(f"structured-{cls.name}-{i}", cls.name, sampling,
                               messages=messages if cls.endpoint == "chat" else None,
                               prompt=None if cls.endpoint == "chat" else prompt,
                               schema=item["schema"], index=i))
    return out


def _with_id(req: PlannedRequest, request_id: str) -> PlannedRequest:
    return planned(request_id, req.prompt_class, req.sampling, messages=req.messages, prompt=req.prompt,
                   schema=req.schema, index=req.index)


async def structured_stage(ctx: AcceptContext) -> StageResult:
    settings = ctx.profile.structured
    base = structured_requests(ctx)
    if not base:
        return StageResult.skip(STRUCTURED, f"no class of scenario {ctx.canary_scenario.name!r} carries a schema")
    sent = await ctx.send({v: [_with_id(r, f"{r.request_id}-{v}") for r in base] for v in ctx.variants})
    records = [r for rs in sent.values() for r in rs]
    ledger: FallbackLedger | None = None
    if settings.fallback:
        ledger = FallbackLedger(ctx.baseline)
        broken = [r for r in records if ledger.needs_fallback(r)]
        by_id = {f"{r.request_id}-{v}": r for v in ctx.variants for r in base}
        retries = [_with_id(by_id[r.request_id], f"{r.request_id}-fallback") for r in broken]
        if retries:
            retried = (await ctx.send({ctx.baseline: retries}))[ctx.baseline]
            for original, retry in zip(broken, retried, strict=True):
                ledger.add(original, retry)
    result = evaluate_structured(settings, ctx.baseline, records, ledger)
    result.metrics["requests_per_variant"] = len(base)
    return result


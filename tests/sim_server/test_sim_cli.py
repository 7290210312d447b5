"""Flag parsing in-process: vLLM defaults, speculative-config validation, faults."""

from __future__ import annotations

import pytest

from speclab.sim.cli import SpecConfigError, defaults_for_gpu, parse_args, spec_config_from_json
from speclab.sim.wire_faults import FaultSpecError, WireFaults, parse_fault, split_faults


def test_vllm_defaults() -> None:
    a = parse_args(["sim-8b"])
    assert (a.port, a.host, a.engine.seed, a.engine.gpu_memory_utilization) == (8000, None, 0, 0.92)
    assert (a.engine.max_num_seqs, a.engine.max_num_batched_tokens) == (1024, 8192)
    assert a.engine.enable_chunked_prefill and a.engine.speculative is None and a.engine.gpu == "H100"
    assert a.stream_interval == 1 and a.per_request_spec_decode_metrics == "none"
    assert defaults_for_gpu("A100") == (256, 2048) and defaults_for_gpu("L4") == (256, 2048)
    b = parse_args(["sim-8b", "--no-enable-chunked-prefill", "--max-model-len", "2k", "--sim-gpu", "H200",
                    "--no-async-scheduling", "--scheduling-policy", "priority", "--api-key", "k1", "k2"])
    assert not b.engine.enable_chunked_prefill and b.engine.max_model_len == 2000
    assert b.engine.async_scheduling is False and b.engine.scheduling_policy == "priority"
    assert b.api_keys == ["k1", "k2"] and b.engine.gpu == "H200"
    c = parse_args(["sim-8b", "--disable-chunked-prefill"])  # vLLM 0.33's visible negative form
    assert not c.engine.enable_chunked_prefill and c.not_modelled == []


def test_unknown_flag_is_argparse_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse_args(["sim-8b", "--num-speculative-tokens", "3"])
    assert info.value.code == 2
    assert "unrecognized arguments: --num-speculative-tokens 3" in capsys.readouterr().err


def test_not_modelled_flags_are_reported() -> None:
    a = parse_args(["sim-8b", "--enable-prefix-caching", "--block-size", "32"])
    assert a.not_modelled == ["--block-size", "--enable-prefix-caching"] or set(a.not_modelled) == {
        "--block-size", "--enable-prefix-caching"}
    # Flags the simulator parses itself but does not act on are reported too.
    b = parse_args(["sim-8b", "--tokenizer", "org/tok", "--revision", "abc", "--async-scheduling"])
    assert set(b.not_modelled) == {"--tokenizer", "--revision", "--async-scheduling"}
    assert parse_args(["sim-8b", "--no-async-scheduling"]).not_modelled == []


def test_spec_config_mirrors_lookup_bounds() -> None:
    s = spec_config_from_json({"method": "ngram", "num_speculative_tokens": 4})
    assert (s.prompt_lookup_min, s.prompt_lookup_max) == (5, 5)
    s = spec_config_from_json({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3})
    assert (s.prompt_lookup_min, s.prompt_lookup_max) == (3, 3)
    s = spec_config_from_json({"model": "sim-1b", "num-speculative-tokens": 5})
    assert (s.method, s.model, s.num_speculative_tokens) == ("draft_model", "sim-1b", 5)
    assert spec_config_from_json({"model": "[ngram]", "num_speculative_tokens": 2}).method == "ngram"


@pytest.mark.parametrize(("cfg", "needle"), [
    ({"method": "medusa", "num_speculative_tokens": 2}, "Input should be"),
    ({"method": "draft_model", "model": "sim-1b"}, "num_speculative_tokens must be provided"),
    ({"method": "draft_model", "model": "sim-1b", "num_speculative_tokens": 0}, "greater than zero"),
    ({"method": "draft_model", "num_speculative_tokens": 2}, "provided but without speculative model"),
    ({"model": "sim-1b", "num_speculative_tokens": 2, "tensor_parallel_size": 2}, "draft_tensor_parallel_size"),
    ({"model": "sim-1b", "num_speculative_tokens": 2, "bogus": 1}, "Extra inputs are not permitted"),
])
def test_spec_config_errors(cfg: dict[str, object], needle: str) -> None:
    with pytest.raises(SpecConfigError, match=needle):
        spec_config_from_json(cfg)


def test_faults() -> None:
    assert parse_fault("stall=0.25") == ("stall", 0.25)
    assert parse_fault("crash_after=3") == ("crash_after", 3.0)
    engine, wire = split_faults(["lossy_verifier=0.3", "http_500", "json_corruption=1"])
    assert engine == {"lossy_verifier": 0.3, "json_corruption": 1.0} and set(wire) == {"http_500"}
    for bad in ("nope", "stall=2", "crash_after=0", "http_500=x"):
        with pytest.raises(FaultSpecError):
            parse_fault(bad)
    a = parse_args(["sim-8b", "--sim-fault", "sampling_drift=0.5", "--sim-fault", "stall=0.5"])
    assert a.engine.faults == {"sampling_drift": 0.5} and a.wire_faults == {"stall": 0.5}


def test_wire_fault_draws_are_seeded_and_proportional() -> None:
    a, b = WireFaults({"http_500": 0.3}, seed=7), WireFaults({"http_500": 0.3}, seed=7)
    plans = [a.plan().http_500 for _ in range(2000)]
    assert plans == [b.plan().http_500 for _ in range(2000)]
    assert 0.25 < sum(plans) / len(plans) < 0.35
    crash = WireFaults({"crash_after": 2}, seed=0)
    assert [crash.request_finished() for _ in range(3)] == [False, True, True]


def test_structured_outputs_config_is_read_as_vllms(capsys: pytest.CaptureFixture[str]) -> None:
    from speclab.sim.engine import build_engine

    args = parse_args(["sim-1b", "--structured-outputs-config",
                       '{"backend": "xgrammar", "disable_any_whitespace": true, "reasoning_parser": "x"}'])
    engine_config = args.engine
    assert engine_config.disable_any_whitespace and not engine_config.disable_additional_properties
    assert engine_config.structured_backend == "xgrammar"
    notes = build_engine(engine_config).notes
    assert any("backend 'xgrammar' is modelled as 'guidance'" in n for n in notes)
    assert "structured_outputs_config.reasoning_parser is accepted but not modelled by speclab-sim" in notes
    assert not build_engine(parse_args(["sim-1b", "--structured-outputs-config", '{"backend": "guidance"}']).engine).notes
    with pytest.raises(SystemExit) as info:
        parse_args(["sim-1b", "--structured-outputs-config", '{"whitespace": true}'])
    assert info.value.code == 2 and "unknown key 'whitespace'" in capsys.readouterr().err

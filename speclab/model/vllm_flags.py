"""The vLLM 0.33 `vllm serve` flags speclab emits, and other flags vLLM 0.33 knows.

The simulator accepts every flag in ``EMITTED`` with vLLM's meaning, warns on ``OTHER_KNOWN``
(not modelled) and rejects anything else with exit 2, as vLLM's parser does. The launcher's argv
builder emits only flags from ``EMITTED``. Checked against vLLM 0.33.0's own parser
(reference/vllm-parser-check.md); ``REMOVED`` are rejected by that parser.
"""

from __future__ import annotations

from typing import Final

# flag -> takes a value (True) or is a switch (False)
EMITTED: Final[dict[str, bool]] = {
    "--speculative-config": True,
    "--max-num-seqs": True,
    "--max-num-batched-tokens": True,
    "--enable-chunked-prefill": False,
    "--no-enable-chunked-prefill": False,
    "--async-scheduling": False,
    "--no-async-scheduling": False,
    "--scheduling-policy": True,
    "--gpu-memory-utilization": True,
    "--max-model-len": True,
    "--tensor-parallel-size": True,
    "--host": True,
    "--port": True,
    "--seed": True,
    "--served-model-name": True,
    "--api-key": True,
    "--enable-per-request-metrics": False,
    "--per-request-spec-decode-metrics": True,
    "--enable-force-include-usage": False,
    "--stream-interval": True,
    "--revision": True,
    "--tokenizer": True,
}

# Known to vLLM 0.33 but not modelled by the simulator: accepted there with a warning.
OTHER_KNOWN: Final[dict[str, bool]] = {
    "--enable-prefix-caching": False,
    "--no-enable-prefix-caching": False,
    "--enable-log-requests": False,
    "--no-enable-log-requests": False,
    "--disable-log-requests": False,
    "--disable-log-stats": False,
    "--dtype": True,
    "--kv-cache-dtype": True,
    "--quantization": True,
    "--trust-remote-code": False,
    "--download-dir": True,
    "--load-format": True,
    "--pipeline-parallel-size": True,
    "--data-parallel-size": True,
    "--max-num-active-seqs": True,
    "--max-num-queued-reqs": True,
    "--max-num-queued-tokens": True,
    "--max-num-scheduled-tokens": True,
    "--long-prefill-token-threshold": True,
    "--enforce-eager": False,
    "--swap-space": True,
    "--block-size": True,
    "--sse-keep-alive-interval": True,
    "--otlp-traces-endpoint": True,
    "--collect-detailed-traces": True,
    "--custom-histogram-buckets": True,
    "--structured-outputs-config": True,
    "--chat-template": True,
    "--generation-config": True,
    "--uvicorn-log-level": True,
    "--api-server-count": True,
    "--code-revision": True,
    "--tokenizer-revision": True,
    "--spec-method": True,
    "--spec-model": True,
    "--spec-tokens": True,
    "--enable-prompt-tokens-details": False,
    "--compilation-config": True,
}

# Removed before 0.33: vLLM's parser exits 2 on these.
REMOVED: Final[frozenset[str]] = frozenset(
    {
        "--speculative-model",
        "--num-speculative-tokens",
        "--speculative-draft-tensor-parallel-size",
        "--guided-decoding-backend",
        "--ngram-prompt-lookup-max",
        "--ngram-prompt-lookup-min",
        "--speculative-max-model-len",
        "--speculative-disable-by-batch-size",
    }
)

SHORT_ALIASES: Final[dict[str, str]] = {"-sc": "--speculative-config", "-tp": "--tensor-parallel-size"}

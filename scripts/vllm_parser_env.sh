#!/usr/bin/env bash
# Build (once) and cache a venv in which vLLM 0.33.0's `vllm serve` argument parser imports on a
# machine without a GPU (docs/contributing.md). tests/servers/test_vllm_parser.py
# feeds every command line speclab builds to that parser. Idempotent: a finished venv is reused.
#
#   scripts/vllm_parser_env.sh            # build or reuse; prints the venv path on success
#   SPECLAB_VLLM_VENV=/path scripts/vllm_parser_env.sh
set -euo pipefail

VENV="${SPECLAB_VLLM_VENV:-$HOME/.cache/speclab/vllm-parser-venv}"
PYTHON="${PYTHON:-python3}"
STAMP="$VENV/.speclab-ready"

if [[ -f "$STAMP" ]]; then
    echo "$VENV"
    exit 0
fi

mkdir -p "$(dirname "$VENV")"
free_kb=$(df -Pk "$(dirname "$VENV")" | awk 'NR==2 {print $4}')
if (( free_kb < 8 * 1024 * 1024 )); then
    echo "vllm_parser_env: need about 8 GiB free under $(dirname "$VENV"), have $((free_kb / 1024)) MiB" >&2
    exit 1
fi

"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
# Exactly this torch: pip takes a local CPU wheel where one exists (find-links), else PyPI's build.
"${PIP[@]}" "torch==2.13.0"
"${PIP[@]}" --no-deps "vllm==0.33.0"
"${PIP[@]}" cbor2 pyzmq requests openai-harmony openai msgspec cloudpickle pillow \
    pybase64 cachetools py-cpuinfo fastapi prometheus_client partial-json-parser \
    'xgrammar==0.2.8' llguidance 'transformers>=5.16.1,<5.21' pydantic numpy psutil \
    sentencepiece tokenizers aiohttp uvloop

VLLM_TARGET_DEVICE=cpu "$VENV/bin/python" - <<'EOF'
from vllm.entrypoints.common.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser

make_arg_parser(FlexibleArgumentParser()).parse_args(["m", "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2}'])
EOF
touch "$STAMP"
echo "$VENV"

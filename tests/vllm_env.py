"""The cached vLLM 0.33 environment (scripts/vllm_parser_env.sh): skip without it on a developer's
machine, fail without it where ``SPECLAB_REQUIRE_VLLM_PARSER=1`` (set by .ci/run)."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

REQUIRE_ENV = "SPECLAB_REQUIRE_VLLM_PARSER"


def missing(reason: str, *, module: bool = False) -> NoReturn:
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1: it must exist here)", pytrace=False)
    pytest.skip(reason, allow_module_level=module)

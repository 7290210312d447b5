"""Start-up failures of the simulator engine, worded the way vLLM words them."""

from __future__ import annotations

from speclab.model.errors import InputError, SpeclabError
from speclab.model.exit_codes import ExitCode


class SimStartupError(SpeclabError):
    """The engine cannot be built from this configuration (vLLM exits 1 at start-up)."""

    exit_code = ExitCode.INTERNAL_ERROR


class UnknownModelError(SimStartupError):
    """The model name is not one of the simulator's models."""

    exit_code = ExitCode.BAD_INPUT


class ModelDoesNotFitError(SimStartupError):
    """Weights, or weights plus one max-length sequence of KV cache, exceed the GPU memory."""


class KvCacheTooSmallError(ModelDoesNotFitError):
    """The weights fit but the KV cache left over cannot hold one max-length sequence (a ValueError in vLLM)."""


class RequestRejectedError(InputError):
    """A request the engine cannot serve (too long for max_model_len); vLLM answers HTTP 400."""

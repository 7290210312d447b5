"""Serving engines behind one protocol (:class:`~speclab.servers.backends.base.Backend`).

- ``ids``: the engine ids and the ``--engine`` choices (import-light, for the command line);
- ``base``: the protocol and the small value types its answers use;
- ``registry``: one backend per id;
- one module per engine: ``vllm`` (vLLM 0.33), ``sim`` (the embedded simulator).

Adding an engine is a module here plus its id in ``ids.EngineId`` and its entry in
``registry.BACKENDS``; docs/contributing.md shows what the module answers.
"""

from __future__ import annotations

from .ids import AUTO, EngineId, EngineRequest, engine_choices, engine_id, engine_request

__all__ = ["AUTO", "EngineId", "EngineRequest", "engine_choices", "engine_id", "engine_request"]

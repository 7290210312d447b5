"""What a front end shows of a run's servers and of the run itself: plain data, shared by live
sessions and replays (a replay rebuilds them from the recording's manifest)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ServerView:
    """Static and slow-changing facts of one variant's server, for the server panel."""

    variant: str
    status: str  # "starting" | "ready" | "relaunching" | "exited" | "attached" | "stopped"
    command: str  # shell-quoted, secrets redacted
    base_url: str
    engine: str  # the engine id as recorded ("vllm", "sim"; servers.backends.EngineId) or "attached"
    settings: dict[str, Any] = field(default_factory=dict)  # k, max_num_seqs, ... as launched
    memory: dict[str, float] = field(default_factory=dict)  # weights_gib, kv_cache_tokens, max_concurrency...
    log_tail: tuple[str, ...] = ()
    baseline: bool = False


@dataclass(frozen=True, slots=True)
class SessionInfo:
    lab: str
    scenario: str
    variants: tuple[str, ...]
    classes: tuple[str, ...]
    simulated: bool
    pair: dict[str, str] = field(default_factory=dict)  # target/draft names and revisions
    arrival: dict[str, Any] = field(default_factory=dict)  # process, rate or concurrency
    replay: bool = False
    time_scale: float = 1.0  # the simulators' S: every time shown is modelled time

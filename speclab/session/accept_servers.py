"""How the launched servers stand after an accept stage: alive, or exited and why (from their logs).

The answered-requests check (``speclab.gates.answered``) needs to tell "the server crashed" from
"the server answered badly"; only the session knows the processes, so the facts are gathered here.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

from speclab.gates.answered import ServerState
from speclab.model.names import ErrorKind
from speclab.servers.manager import RunningServer

from .server_watch import EXIT_WAIT_S

# Errors a dead server leaves; only then is it worth waiting a moment for the exit to be seen.
_DEATH_SIGNS = frozenset({ErrorKind.CONNECT.value, ErrorKind.TRUNCATED.value})


async def server_states(servers: Mapping[str, RunningServer], kinds: Mapping[str, Set[str]]) -> dict[str, ServerState]:
    """A state for each launched variant; a moment's wait where the error ``kinds`` its requests met
    (``AnsweredTally.error_kinds``) show signs of a death."""
    states: dict[str, ServerState] = {}
    for variant, server in servers.items():
        process = server._process
        if process is None:
            continue
        seen = kinds.get(variant, frozenset())
        exited = await process.exit_cause(timeout=EXIT_WAIT_S if seen & _DEATH_SIGNS else 0.0)
        if exited is not None and server is not None:
            server.status = "exited"
        states[variant] = ServerState(exited=exited)
    return states

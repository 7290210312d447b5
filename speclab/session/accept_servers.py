"""How the launched servers stand after an accept stage: alive, or exited and why (from their logs).

The answered-requests check (``speclab.gates.answered``) needs to tell "the server crashed" from
"the server answered badly"; only the session knows the processes, so the facts are gathered here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from speclab.gates.answered import ServerState
from speclab.model.names import ErrorKind
from speclab.model.records import RequestRecord
from speclab.servers.manager import RunningServer

# Errors a dead server leaves; only then is it worth waiting a moment for the exit to be seen.
_DEATH_SIGNS = frozenset({ErrorKind.CONNECT.value, ErrorKind.TRUNCATED.value})
EXIT_WAIT_S = 2.0


async def server_states(servers: Mapping[str, RunningServer], records: Iterable[RequestRecord]) -> dict[str, ServerState]:
    """A state for each launched variant; a moment's wait where ``records`` show signs of a death."""
    kinds: dict[str, set[str]] = {}
    for record in records:
        if record.error_kind is not None:
            kinds.setdefault(record.variant, set()).add(str(record.error_kind))
    states: dict[str, ServerState] = {}
    for variant, server in servers.items():
        process = server._process
        if process is None:
            continue
        seen = kinds.get(variant, set())
        exited = await process.exit_cause(timeout=EXIT_WAIT_S if seen & _DEATH_SIGNS else 0.0)
        if exited is not None and server is not None:
            server.status = "exited"
        states[variant] = ServerState(exited=exited)
    return states

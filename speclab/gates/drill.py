"""What a rollback drill measured, from two outside observers, and its verdict (exit 17).

The client saw every request: when it was sent, which backend answered (``X-Speclab-Backend``)
and when its response finished. HAProxy's runtime API, polled from just before the rollback
command until the speculative servers had no request in progress, saw its own counters: the
requests in progress on each speculative server (``scur``) and the total it had been given
(``stot``). A poll brackets each HAProxy moment between two reads, so HAProxy's figures are
upper bounds within one poll period. Each figure of the drill is the later of the two views:

- ``rollback_s``: command → the last request routed to a speculative backend (0 when none was
  routed after the command);
- ``drain_s``: command → the last in-flight speculative response finished;
- ``confirmed_s``: command → HAProxy's maps and weights read back as the rolled-back routing.

A request "failed because of the flip" when it was in flight at the command, or was sent while
the change was being applied (command → confirmed), and did not complete. The drill fails (exit
17) when ``rollback_s`` or ``confirmed_s`` exceeds ``ROLLBACK_LIMIT_S`` or any such request failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from speclab.metrics.cells import finish_time
from speclab.model.records import RequestRecord

ROLLBACK_LIMIT_S = 2.0


@dataclass
class GatewayWatch:
    """HAProxy's view of the speculative servers around the flip (run-clock seconds)."""

    poll_period_s: float = 0.02
    polls: int = 0
    in_flight_at_flip: int | None = None  # scur summed over the speculative servers, just before
    total_at_flip: int | None = None  # stot summed likewise
    routed_after_command: int = 0  # stot growth after the command
    last_routed_s: float | None = None  # first poll that saw stot grow for the last time (upper bound)
    drained_s: float | None = None  # first poll after the command with scur 0 (upper bound)
    error: str | None = None


@dataclass(frozen=True)
class Flip:
    command_s: float  # run clock: the rollback command was issued
    confirmed_s: float | None  # run clock: the routing read back rolled back (None: never)
    speculative: tuple[str, ...]
    by: str = "schedule"  # "schedule" (--rollback-at) or the trigger that fired


@dataclass
class FlipMeasure:
    rollback_s: float | None
    drain_s: float | None
    confirmed_s: float | None
    in_flight_at_flip: int
    failed_during_flip: int
    converged: bool
    observers: dict[str, Any] = field(default_factory=dict)
    failed_samples: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "rollback_s": self.rollback_s, "drain_s": self.drain_s, "confirmed_s": self.confirmed_s,
            "in_flight_at_flip": self.in_flight_at_flip, "failed_during_flip": self.failed_during_flip,
            "converged": self.converged, "observers": self.observers, "failed_samples": self.failed_samples,
        }


def _later(*values: float | None) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def measure_flip(records: Sequence[RequestRecord], flip: Flip, watch: GatewayWatch) -> FlipMeasure:
    cmd = flip.command_s
    spec = [r for r in records if r.backend in flip.speculative and r.sent is not None]
    in_flight = [r for r in spec if r.sent is not None and r.sent <= cmd < finish_time(r)]
    after = [r for r in spec if r.sent is not None and r.sent > cmd]
    last_sent = max(r.sent for r in spec if r.sent is not None) - cmd if spec else None
    last_done = max(finish_time(r) for r in spec) - cmd if spec else None
    client_rollback = None if last_sent is None else max(0.0, last_sent)
    client_drain = None if last_done is None else max(0.0, last_done)
    haproxy_rollback = 0.0 if watch.polls and watch.routed_after_command == 0 else (
        None if watch.last_routed_s is None else max(0.0, watch.last_routed_s - cmd))
    haproxy_drain = None if watch.drained_s is None else max(0.0, watch.drained_s - cmd)
    confirmed = None if flip.confirmed_s is None else max(0.0, flip.confirmed_s - cmd)
    window_end = cmd if flip.confirmed_s is None else flip.confirmed_s
    at_risk = [r for r in records if r.sent is not None and
               ((r.sent <= cmd < finish_time(r)) or cmd <= r.sent <= window_end)]
    failed = [r for r in at_risk if not r.ok]
    late = [r for r in spec if flip.confirmed_s is not None and r.sent is not None and r.sent > flip.confirmed_s]
    drained = haproxy_drain is not None or (watch.polls == 0 and client_drain is not None)
    observers = {
        "client": {"last_speculative_sent_s": _r(last_sent), "last_speculative_finished_s": _r(last_done),
                   "in_flight_at_flip": len(in_flight), "speculative_sent_after_command": len(after),
                   "speculative_sent_after_confirmed": len(late)},
        "haproxy": {"last_routed_s": _r(haproxy_rollback), "drained_s": _r(haproxy_drain),
                    "in_flight_at_flip": watch.in_flight_at_flip, "routed_after_command": watch.routed_after_command,
                    "polls": watch.polls, "poll_period_s": watch.poll_period_s, "error": watch.error},
    }
    return FlipMeasure(
        rollback_s=_r(_later(client_rollback, haproxy_rollback)),
        drain_s=_r(_later(client_drain, haproxy_drain)),
        confirmed_s=_r(confirmed),
        in_flight_at_flip=max(len(in_flight), watch.in_flight_at_flip or 0),
        failed_during_flip=len(failed),
        converged=confirmed is not None and drained and not late,
        observers=observers,
        failed_samples=[{"request_id": r.request_id, "tenant": r.tenant, "backend": r.backend,
                         "error_kind": r.error_kind, "error": (r.error_message or "")[:160]} for r in failed[:10]],
    )


def drill_failures(measure: FlipMeasure | None, limit_s: float = ROLLBACK_LIMIT_S) -> list[str]:
    """Why the drill fails (exit 17); empty when it passes."""
    if measure is None:
        return ["no rollback was made"]
    out: list[str] = []
    if measure.observers.get("client", {}).get("last_speculative_sent_s") is None:
        out.append("no request reached a speculative backend, so the rollback moved nothing that was measured")
    if measure.rollback_s is not None and measure.rollback_s > limit_s:
        out.append(f"rollback_s {measure.rollback_s:.3f} s: a request was routed to a speculative backend "
                   f"more than {limit_s:g} s after the rollback command")
    if measure.confirmed_s is None:
        out.append("HAProxy's routing never read back as rolled back")
    elif measure.confirmed_s > limit_s:
        out.append(f"HAProxy took {measure.confirmed_s:.3f} s to confirm the rollback (limit {limit_s:g} s)")
    if measure.failed_during_flip:
        kinds = sorted({str(s["error_kind"]) for s in measure.failed_samples})
        out.append(f"{measure.failed_during_flip} request(s) in flight at the flip or sent during it failed "
                   f"({', '.join(kinds)})")
    if not measure.converged and measure.confirmed_s is not None:
        out.append("the traffic did not converge on the baseline (a speculative request after the confirmation, "
                   "or in-flight speculative requests that never drained)")
    return out

"""Relaunching one variant mid-run: the one code path the app's `e` and `--change` both take.

A relaunch is an epoch boundary (docs/measurements.md, "Config epochs"): a ``transition`` event at the
request ends the variant's epoch; the server restarts; once it has answered a request of its own
(not traffic: a one-token completion, so no measured request is spent on finding out), a
``relaunch`` event starts the next epoch and only then do the traffic workers switch to the new
target, stamping its epoch on every record. Requests in between belong to the transition. The old
server is scraped once more before it stops, and the new one is counted from zero (the scraper
sees the restart), so the server-side counters still reconcile with the per-request sums.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp

from speclab.metrics.scraper import MetricsScraper
from speclab.model import limits as L
from speclab.model.epochs import (
    RELAUNCH_EVENT,
    RELAUNCH_FAILED_EVENT,
    TRANSITION_EVENT,
    epoch_label,
    settings_text,
)
from speclab.model.errors import InputError, ServerNotReadyError, SpeclabError
from speclab.model.lab import RELAUNCH_KEYS, Lab
from speclab.model.records import Event
from speclab.servers.manager import RunningServer
from speclab.traffic.client import Target

if TYPE_CHECKING:
    from .live import LiveSession

KEY_ALIASES = {"k": "num_speculative_tokens"}


@dataclass(frozen=True, slots=True)
class ScheduledChange:
    """``--change AT:VARIANT:KEY=VALUE[,KEY=VALUE]``: at AT s after traffic starts, relaunch VARIANT."""

    at_s: float
    variant: str
    settings: dict[str, Any]
    spec: str

    @property
    def text(self) -> str:
        return f"{self.variant} at {self.at_s:g} s: {settings_text(self.settings)}"


def _value(text: str) -> Any:
    lowered = text.strip().lower()
    if lowered in ("true", "on", "yes"):
        return True
    if lowered in ("false", "off", "no"):
        return False
    for kind in (int, float):
        with contextlib.suppress(ValueError):
            return kind(text)
    return text.strip()


def parse_change(spec: str) -> ScheduledChange:
    """Parse one ``--change``; InputError (exit 2) naming what is wrong."""
    at, sep1, rest = spec.partition(":")
    variant, sep2, assignments = rest.partition(":")
    if not (sep1 and sep2 and variant and assignments):
        raise InputError(f"--change {spec!r}: expected AT:VARIANT:KEY=VALUE[,KEY=VALUE]")
    try:
        at_s = float(at)
    except ValueError:
        raise InputError(f"--change {spec!r}: AT must be seconds after traffic starts, got {at!r}") from None
    if not 0 <= at_s <= L.MAX_DURATION_S:  # NaN fails both
        raise InputError(f"--change {spec!r}: AT must be 0 to {L.MAX_DURATION_S:.0f} seconds, got {at!r}")
    settings: dict[str, Any] = {}
    for item in assignments.split(","):
        key, sep, value = item.partition("=")
        key = KEY_ALIASES.get(key.strip(), key.strip())
        if not sep or not key or not value.strip():
            raise InputError(f"--change {spec!r}: expected KEY=VALUE, got {item!r}")
        if key not in RELAUNCH_KEYS:
            raise InputError(f"--change {spec!r}: cannot change {key!r} on relaunch; allowed: "
                             f"{', '.join(sorted(RELAUNCH_KEYS))}")
        settings[key] = _value(value)
    return ScheduledChange(at_s, variant.strip(), settings, spec)


def check_changes(changes: tuple[ScheduledChange, ...], lab: Lab | None, variants: tuple[str, ...]) -> None:
    """Each change names a launched variant and settings the lab accepts (before anything starts)."""
    for change in changes:
        if lab is None:
            raise InputError(f"--change {change.spec!r}: attached servers were not launched by speclab")
        if change.variant not in variants:
            raise InputError(f"--change {change.spec!r}: no variant {change.variant!r} in this run "
                             f"(it has {', '.join(variants)})")
        try:
            lab.with_changes(change.variant, change.settings)
        except (ValueError, KeyError) as error:
            raise InputError(f"--change {change.spec!r}: {error}".splitlines()[0]) from None


async def first_answer(http: aiohttp.ClientSession, server: RunningServer, timeout_s: float) -> float:
    """Seconds until the server answered a one-token completion with 200; ServerNotReadyError if not."""
    started = time.monotonic()
    body = {"model": server.model_name or "", "prompt": "Hello", "max_tokens": 1, "temperature": 0}
    last = "no answer"
    while time.monotonic() - started < timeout_s:
        try:
            async with http.post(f"{server.base_url}/v1/completions", json=body, headers=server.headers,
                                 timeout=aiohttp.ClientTimeout(total=min(30.0, timeout_s))) as resp:
                await resp.read()
                if resp.status == 200:
                    return time.monotonic() - started
                last = f"HTTP {resp.status}"
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as error:
            last = f"{type(error).__name__}: {error}"
        await asyncio.sleep(0.2)
    raise ServerNotReadyError(f"{server.variant}: relaunched server answered no request within {timeout_s:g} s "
                              f"(last: {last})")


def target_for(server: RunningServer, epoch: int) -> Target:
    settings = server.settings
    k = int(settings.get("num_speculative_tokens") or 0) if settings.get("method") else 0
    return Target(variant=server.variant, base_url=server.base_url, model=server.model_name or "",
                  headers=dict(server.headers), num_spec_tokens=k, epoch=epoch, engine=server.backend.id)


async def relaunch_variant(session: LiveSession, variant: str, changes: dict[str, Any]) -> None:
    """Relaunch ``variant`` with ``changes``: transition, restart, first answer, new epoch, new target."""
    manager = session.manager
    if manager is None:
        raise InputError("relaunch: attached servers were not launched by speclab")
    if variant in session.relaunching:
        raise InputError(f"relaunch {variant}: a relaunch of {variant} is already under way")
    manager.check_relaunch(variant, changes)  # refused settings end here: the old server keeps serving
    book = session.aggregator.book
    session.relaunching.add(variant)
    try:
        before = book.current(variant)
        t0 = session.now()
        session.add_event(Event(t=t0, kind=TRANSITION_EVENT, variant=variant,
                                message=f"{variant}: relaunching with {settings_text(changes) or 'the same settings'}; "
                                        f"{book.label(variant, before)} ends here",
                                data={"from_epoch": before, "to_epoch": before + 1, "requested": dict(changes)}))
        old_url = session.servers_running[variant].base_url
        if session.runner is not None:
            await session.runner.hold(variant)  # closed-loop slots wait for the new server
        await session.scrape_once(variant)  # the old server's last counts, before it stops
        try:
            done = await manager.relaunch(variant, changes)
            # The old server had stopped when the new one began to start (a request that finished
            # later was the new server's, on the same port): the cross-check pairs them so.
            stopped_at = session.now() - session.time_scale.to_model(float(done.data.get("ready_after_s") or 0.0))
            server = session.servers_running[variant] = manager.servers[variant]
            server.headers = dict(session.headers)
            await first_answer(session.http, server, server.backend.readiness.answer_timeout_s)
        except SpeclabError as error:
            session.add_event(Event(t=session.now(), kind=RELAUNCH_FAILED_EVENT, variant=variant,
                                    message=f"{variant}: relaunch failed: {error}", data={"from_epoch": before}))
            raise
        if server.base_url != old_url:  # same URL: the scraper sees the restart and counts from zero
            session.scrapers[variant] = MetricsScraper(server.base_url, variant, headers=server.headers,
                                                       fresh_server=True, names=server.backend.prometheus)
        epoch = before + 1
        first = book.info(variant, 1)
        label = epoch_label(variant, epoch, first.settings if first else {}, server.settings)
        t1 = session.now()
        session.add_event(Event(
            t=t1, kind=RELAUNCH_EVENT, variant=variant,
            message=f"{done.message}; {label} from t={t1:.1f} s (transition {t1 - t0:.1f} s)",
            data={**done.data, "epoch": epoch, "label": label, "settings": dict(server.settings),
                  "old_stopped_s": round(stopped_at, 3)},
        ))
        if session.runner is not None:
            await session.runner.set_target(target_for(server, epoch))
    finally:
        session.relaunching.discard(variant)


async def run_changes(session: LiveSession, changes: tuple[ScheduledChange, ...], traffic_start: float) -> None:
    """Apply each scheduled change at its time: one variant's changes in order, different variants
    at once. A failed one is an event and a recorded failure, not the end of the run."""
    by_variant: dict[str, list[ScheduledChange]] = {}
    for change in sorted(changes, key=lambda c: c.at_s):
        by_variant.setdefault(change.variant, []).append(change)
    await asyncio.gather(*(_run_in_order(session, items, traffic_start) for items in by_variant.values()))


async def _run_in_order(session: LiveSession, changes: list[ScheduledChange], traffic_start: float) -> None:
    for change in changes:
        delay = traffic_start + change.at_s - session.now()
        if delay > 0:
            await session.sleep(delay)  # AT is modelled time
        try:
            await relaunch_variant(session, change.variant, dict(change.settings))
        except SpeclabError as error:
            session.change_failures.append(f"--change {change.spec}: {error}")
        except Exception as error:  # recorded and reported; the run and its measurements go on
            session.change_failures.append(f"--change {change.spec}: {type(error).__name__}: {error}")
        session.changes_applied.append(change)

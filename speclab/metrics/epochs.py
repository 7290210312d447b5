"""Which config epoch, or which transition, each record belongs to (docs/measurements.md, "Config epochs").

The boundaries come from events only (``model.epochs``): a ``transition`` event ends a variant's
current epoch at the relaunch request; a ``relaunch`` event, sent once the new server has answered
a request, starts the next epoch. A live run and its replay read the same events, so they draw the
same boundaries. Each record carries the epoch its request was sent to (the traffic workers switch
targets only after the new epoch began). A record sent to epoch e that finished at or after e's
transition began (killed by the restart, or sent to a server that was stopping or not yet up) is
the transition's: counted there, in no epoch. Records of the new epoch are all sent after the new
server answered, so nothing is counted twice and nothing of the restart reaches either epoch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from speclab.model.epochs import (
    RELAUNCH_EVENT,
    TRANSITION_EVENT,
    EpochInfo,
    TransitionInfo,
    epoch_label,
)
from speclab.model.records import Event, RequestRecord

from .cells import finish_time


@dataclass(slots=True)
class _Transition:
    variant: str
    from_epoch: int
    to_epoch: int
    start_s: float
    end_s: float | None = None
    requests: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def frozen(self) -> TransitionInfo:
        return TransitionInfo(self.variant, self.from_epoch, self.to_epoch, self.start_s, self.end_s,
                              self.requests, dict(self.errors))


class EpochBook:
    """Epochs and transitions per variant; ``place`` assigns each record to one or the other."""

    def __init__(self) -> None:
        self._epochs: dict[str, list[EpochInfo]] = {}
        self._transitions: dict[str, list[_Transition]] = {}
        self.revision = 0  # bumped on every boundary change, so consumers can cache

    # ---- boundaries ---------------------------------------------------------------------------
    def launch(self, variant: str, settings: dict[str, Any]) -> None:
        """The settings a variant was launched with (epoch 1)."""
        epochs = self._ensure(variant)
        epochs[0] = dataclasses.replace(epochs[0], settings=dict(settings))
        self.revision += 1

    def on_event(self, event: Event) -> bool:
        """Apply a boundary event; False for events that are not one."""
        variant = event.variant
        if not variant:
            return False
        if event.kind == TRANSITION_EVENT:
            return self._begin_transition(variant, event.t)
        if event.kind == RELAUNCH_EVENT and "epoch" in event.data:
            # A relaunch event without an epoch comes from a recording made before epochs existed:
            # its records carry no epoch either, so the run stays one epoch, as it was measured.
            return self._begin_epoch(variant, event)
        return False

    def _begin_transition(self, variant: str, t: float) -> bool:
        epochs = self._ensure(variant)
        if self.open_transition(variant) is not None:
            return False  # a retry of a relaunch that failed: the same transition goes on
        current = epochs[-1]
        epochs[-1] = dataclasses.replace(current, end_s=t)
        self._transitions.setdefault(variant, []).append(_Transition(variant, current.epoch, current.epoch + 1, t))
        self.revision += 1
        return True

    def _begin_epoch(self, variant: str, event: Event) -> bool:
        epochs = self._ensure(variant)
        transition = self.open_transition(variant)
        if transition is None:  # no request event: a zero-length transition at the relaunch
            self._begin_transition(variant, event.t)
            transition = self.open_transition(variant)
            assert transition is not None
        number = int(event.data.get("epoch") or epochs[-1].epoch + 1)
        settings = dict(event.data.get("settings") or {})
        if not settings:
            changes = event.data.get("changes") or {}
            settings = {**epochs[-1].settings,
                        **{k: v.get("to") if isinstance(v, dict) else v for k, v in changes.items()}}
        transition.end_s = event.t
        transition.to_epoch = number
        label = str(event.data.get("label") or epoch_label(variant, number, epochs[0].settings, settings))
        epochs.append(EpochInfo(variant, number, label, settings, start_s=event.t))
        self.revision += 1
        return True

    # ---- records -------------------------------------------------------------------------------
    def place(self, record: RequestRecord) -> int | None:
        """The epoch ``record`` counts in, or None: it fell in a transition (and is counted there)."""
        epochs = self._ensure(record.variant)
        if record.epoch > epochs[-1].epoch:  # sent to an epoch no event announced: keep it apart
            start = record.sent if record.sent is not None else record.intended
            epochs.append(EpochInfo(record.variant, record.epoch, f"{record.variant}·{record.epoch}", {}, start))
            self.revision += 1
        transition = self.ending(record)
        if transition is None:
            return record.epoch
        if not record.warmup:
            transition.requests += 1
            if not record.ok:
                kind = record.error_kind or "cancelled"
                transition.errors[kind] = transition.errors.get(kind, 0) + 1
        return None

    def ending(self, record: RequestRecord) -> _Transition | None:
        """The transition out of the epoch ``record`` was sent to, if it finished in it."""
        for transition in self._transitions.get(record.variant, ()):
            if transition.from_epoch == record.epoch and finish_time(record) >= transition.start_s:
                return transition
        return None

    # ---- queries -------------------------------------------------------------------------------
    def _ensure(self, variant: str) -> list[EpochInfo]:
        epochs = self._epochs.get(variant)
        if epochs is None:
            epochs = self._epochs[variant] = [EpochInfo(variant, 1, variant)]
        return epochs

    def current(self, variant: str) -> int:
        """The newest epoch that began (during a transition, the one that is ending)."""
        return self._ensure(variant)[-1].epoch

    def info(self, variant: str, epoch: int) -> EpochInfo | None:
        for info in self._ensure(variant):
            if info.epoch == epoch:
                return info
        return None

    def epochs(self, variant: str) -> tuple[EpochInfo, ...]:
        return tuple(self._ensure(variant))

    def label(self, variant: str, epoch: int) -> str:
        info = self.info(variant, epoch)
        return info.label if info is not None else f"{variant}·{epoch}"

    def covering(self, variant: str, start_s: float, end_s: float) -> EpochInfo | None:
        """The epoch of ``variant`` that [start_s, end_s] lies wholly inside, if one does."""
        for info in self._ensure(variant):
            if info.covers(start_s, end_s):
                return info
        return None

    def open_transition(self, variant: str) -> _Transition | None:
        transitions = self._transitions.get(variant)
        if transitions and transitions[-1].end_s is None:
            return transitions[-1]
        return None

    def in_transition(self, variant: str) -> bool:
        return self.open_transition(variant) is not None

    def transitions(self) -> tuple[TransitionInfo, ...]:
        out = [t.frozen() for items in self._transitions.values() for t in items]
        return tuple(sorted(out, key=lambda t: (t.start_s, t.variant)))

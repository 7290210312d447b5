"""Python's cyclic garbage collector in the engine process: between steps, never inside one.

Left to itself the collector runs wherever an allocation crosses its threshold, which in the engine
process is inside a step. Measured on a step loop at 64 in flight (sim-8b, a k=4 sim-1b draft), its
passes took 5% of the loop's time and each full collection 11–40 ms, up to a whole modelled step
late (the sequences' context states and the n-gram caches are many small containers). A step makes
no cyclic garbage (refcounting frees it all), so the engine process turns automatic collection off
and collects at the end of a step, after its reply is on the wire, in the time the server spends
sleeping to the step's modelled end: the young generation once enough has been allocated, and
everything after a step or a request that raised (a traceback is a cycle) and every ``full_every``
steps, so a cycle made on some rare path is still freed. Not when the engine runs out of work: a
request that arrives then would wait for the collection.
"""

from __future__ import annotations

import gc

YOUNG_ALLOCATIONS = 5000  # tracked allocations (net) before a young collection; CPython's default is 700
FULL_EVERY = 2000  # steps between full collections while requests never run out (about a minute at 30 ms)


class StepCollector:
    """Owns the collector for one engine process: ``start`` once the models are built, ``after_step``
    after each step's reply is sent."""

    def __init__(self, young_allocations: int = YOUNG_ALLOCATIONS, full_every: int = FULL_EVERY) -> None:
        self.young_allocations = young_allocations
        self.full_every = full_every
        self.steps = 0
        self.young = 0
        self.full = 0

    def start(self) -> None:
        """Collect and freeze what building left (the models' tables live as long as the process),
        then stop automatic collection."""
        gc.collect()
        gc.freeze()
        gc.disable()

    def stop(self) -> None:
        """Automatic collection back on, the frozen objects collectable again (a bench or a test
        that built an engine in its own process)."""
        gc.unfreeze()
        gc.enable()

    def after_step(self, *, failed: bool = False) -> None:
        """The step is answered: collect now, while the server waits out its modelled time."""
        self.steps += 1
        if failed or self.steps % self.full_every == 0:
            gc.collect()
            self.full += 1
        elif gc.get_count()[0] >= self.young_allocations:
            gc.collect(0)
            self.young += 1

"""``python -m tests.sim_server.fake_main MODEL [flags]``: the simulator server over FakeEngine."""

from __future__ import annotations

import sys

from speclab.sim.startup import main

from .fake_engine import build_fake_engine

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], build_fake_engine))

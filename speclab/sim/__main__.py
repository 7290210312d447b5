"""``python -m speclab.sim MODEL [flags]``: the simulated vLLM 0.33 server."""

from __future__ import annotations

import sys

from .startup import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Run the app on the fake source in a real terminal: ``.venv/bin/python -m tests.ui.demo_fake``.

``--replay`` opens it without controls, as a replay would; ``--loop`` keeps snapshots coming.
"""

from __future__ import annotations

import sys

from speclab.ui import create_app
from tests.ui.fakes import FakeSource


def main(argv: list[str]) -> int:
    replay = "--replay" in argv
    source = FakeSource(delay=0.25, replay=replay, loop_forever="--loop" in argv)
    app = create_app(source, None if replay else source)
    app.run()
    return app.return_code or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""sweep/ is pure reductions over reports: it imports no session, front end, traffic or simulator."""

from __future__ import annotations

import subprocess
import sys

FORBIDDEN = ("speclab.session", "speclab.ui", "speclab.cli", "speclab.headless", "speclab.traffic", "speclab.sim",
             "speclab.gates", "textual", "rich")


def test_sweep_imports_only_lower_layers() -> None:
    code = (
        "import importlib, pkgutil, sys\n"
        "import speclab.sweep\n"
        "for info in pkgutil.walk_packages(speclab.sweep.__path__, prefix='speclab.sweep.'):\n"
        "    importlib.import_module(info.name)\n"
        f"bad = sorted(m for m in sys.modules if m.startswith({FORBIDDEN!r}))\n"
        "print(','.join(bad))\n"
        "print('pyplot' if 'matplotlib.pyplot' in sys.modules else '')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    bad, pyplot = [*out.stdout.splitlines(), "", ""][:2]
    assert bad == "", f"speclab.sweep imported {bad}"
    assert pyplot == "", "speclab.sweep imported matplotlib.pyplot (it must draw on the Agg canvas only)"


def test_importing_the_package_does_not_load_matplotlib() -> None:
    out = subprocess.run([sys.executable, "-c", "import sys, speclab.sweep; print('matplotlib' in sys.modules)"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr

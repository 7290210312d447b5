"""The core never imports Textual or Rich (only speclab.ui and speclab.cli may)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import speclab

CORE_PREFIXES = ("speclab.ui", "speclab.cli")


def _core_modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(speclab.__path__, prefix="speclab."):
        if info.name.startswith(CORE_PREFIXES) or info.name.endswith("__main__"):
            continue
        names.append(info.name)
    return names


def test_core_modules_do_not_import_textual_or_rich() -> None:
    modules = _core_modules()
    assert "speclab.model.records" in modules
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"core imported: {out.stdout.strip()}"


def test_sim_imports_only_model() -> None:
    code = (
        "import importlib, pkgutil, sys\n"
        "import speclab.sim\n"
        "for info in pkgutil.walk_packages(speclab.sim.__path__, prefix='speclab.sim.'):\n"
        "    if not info.name.endswith('__main__'):\n"
        "        importlib.import_module(info.name)\n"
        "bad = sorted(m for m in sys.modules if m.startswith('speclab.') and not m.startswith(('speclab.sim', 'speclab.model')))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"speclab.sim imported: {out.stdout.strip()}"

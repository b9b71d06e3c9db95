"""The engine is a library first: importing any of it must not pull in the TUI or textual."""

from __future__ import annotations

import subprocess
import sys

_CHECK = """
import importlib, pkgutil, sys
import engine
names = [m.name for m in pkgutil.walk_packages(engine.__path__, "engine.")]
for name in names:
    if name == "engine.__main__":
        continue
    importlib.import_module(name)
bad = sorted(m for m in sys.modules if m == "textual" or m.startswith(("textual.", "tui")))
print(len(names))
print(",".join(bad))
"""


def test_engine_never_imports_textual() -> None:
    out = subprocess.run([sys.executable, "-c", _CHECK], capture_output=True, text=True, check=True).stdout
    count, bad = out.strip().split("\n") if "\n" in out.strip() else (out.strip(), "")
    assert int(count) > 30  # really walked the package
    assert bad == "", f"engine imported {bad}"

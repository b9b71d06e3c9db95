"""A library that is installed but refuses to import, as pyarrow 26 does under NumPy 1 ("pyarrow requires
NumPy 2.0 or newer"): what the user sees then is tested without installing a second NumPy."""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

import pytest

PYARROW_UNDER_NUMPY1 = "pyarrow requires NumPy 2.0 or newer, found 1.26.4"  # pyarrow 26.0.0's words


class _Refuses(importlib.abc.MetaPathFinder):
    def __init__(self, module: str, message: str) -> None:
        self.module, self.message = module, message

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname == self.module or fullname.startswith(self.module + "."):
            raise ImportError(self.message, name=fullname)  # what the library's own import raises
        return None


def refuse_import(monkeypatch: pytest.MonkeyPatch, module: str, message: str = PYARROW_UNDER_NUMPY1) -> None:
    """From now until the test ends, `import module` (and its submodules) raises ImportError(message);
    the modules already imported come back afterwards."""
    for name in [n for n in sys.modules if n == module or n.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_Refuses(module, message), *sys.meta_path])

"""Modules as the selector sees them: training uses one module's sweeps by default (`pick_module`),
and `train-selector --across-modules` makes the module a one-hot feature (`module_column_names`,
`module_one_hot`): results of two modules are never pooled as if of one board."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from engine.core.errors import ConfigError

__all__ = ["MODULE_PREFIX", "module_column_names", "module_one_hot", "modules_of_schema", "pick_module"]


MODULE_PREFIX = "module="


def module_column_names(modules: Sequence[str]) -> tuple[str, ...]:
    """The one-hot columns of `train-selector --across-modules` (`module=P3701-0005 (AGX Orin 64GB)`)."""
    return tuple(MODULE_PREFIX + m for m in modules)


def module_one_hot(row_modules: Sequence[str], modules: Sequence[str]) -> np.ndarray:
    """One row per module named: 1 in its module's column, 0 elsewhere."""
    index = {m: i for i, m in enumerate(modules)}
    out = np.zeros((len(row_modules), len(modules)))
    for r, m in enumerate(row_modules):
        if m not in index:
            raise ConfigError(f"the selector was not trained on module {m!r}",
                              f"give --module one of: {', '.join(modules)}")
        out[r, index[m]] = 1.0
    return out


def modules_of_schema(columns: Sequence[str]) -> tuple[str, ...]:
    """The modules of an across-module selector's feature columns (none for a per-module one)."""
    return tuple(c[len(MODULE_PREFIX):] for c in columns if c.startswith(MODULE_PREFIX))


def pick_module(modules: Sequence[str], module: str | None, profile_module: str, profile: str) -> str | None:
    """The one module a per-module training uses: `module` if given (and swept), else the only one
    swept, else the profile's when it was swept; several and none chosen is refused."""
    if module is not None:
        if module not in modules:
            raise ConfigError(f"no sweep of module {module!r} to train on"
                              + (f" (the store has {', '.join(modules)})" if modules else ""),
                              "sweep on a board of that module, or give --module one of those swept")
        return module
    if len(modules) <= 1:
        return modules[0] if modules else None
    if profile_module in modules:
        return profile_module
    raise ConfigError(f"the store holds sweeps of {len(modules)} modules ({', '.join(modules)}) and the profile "
                      f"{profile} is of none of them", "give --module M to train for one, or --across-modules to "
                      "learn across them with the module as a feature")


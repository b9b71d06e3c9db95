"""Modules as the selector sees them: training uses one module's sweeps by default (`pick_module`),
and `train-selector --across-modules` makes the module a one-hot feature (`module_column_names`,
`module_one_hot`): results of two modules are never pooled as if of one board."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from engine.core.errors import ConfigError

if TYPE_CHECKING:  # dataset imports this module
    from engine.selector.dataset import Dataset

__all__ = ["MODULE_PREFIX", "concat", "module_column_names", "module_one_hot", "modules_of_schema", "pick_module"]


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


def concat(parts: Sequence[Dataset], *, module_columns: tuple[str, ...] = ()) -> Dataset:
    """Datasets (engine.selector.dataset.Dataset) of one encoding as one: their rows in order, notes and
    devices once each, the modules of their rows kept (`module_columns`: the one-hot features, if any)."""
    first = parts[0]
    weights = None
    if any(p.weights is not None for p in parts):
        weights = np.concatenate([p.weights if p.weights is not None else np.ones(len(p)) for p in parts])
    return type(first)(
        workloads=sum((p.workloads for p in parts), ()), settings=sum((p.settings for p in parts), ()),
        time_per_sample=np.concatenate([p.time_per_sample for p in parts]),
        power_w=np.concatenate([p.power_w for p in parts]),
        energy_per_sample=np.concatenate([p.energy_per_sample for p in parts]),
        sources=sum((p.sources for p in parts), ()), encoder=first.encoder, space=first.space,
        source_column=first.source_column, notes=tuple(dict.fromkeys(n for p in parts for n in p.notes)),
        weights=weights, devices=tuple(dict.fromkeys(d for p in parts for d in p.devices)),
        row_modules=sum((p.row_modules for p in parts), ()), module_columns=module_columns,
    )

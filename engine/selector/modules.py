"""Modules as the selector sees them: training uses one module's sweeps by default (`pick_module`),
and `train-selector --across-modules` (or the twin zoos of several profiles) learns across modules,
each row encoded against its own module's profile (`encoder_of_module`: the module columns of
engine.selector.features): results of two modules are never pooled as if of one board."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from engine.core.errors import ConfigError
from engine.selector.features import SettingEncoder

if TYPE_CHECKING:  # dataset imports this module
    from engine.selector.dataset import Dataset

__all__ = ["concat", "encoder_of_module", "pick_module"]

log = logging.getLogger(__name__)


def encoder_of_module(module: str, fallback: SettingEncoder) -> SettingEncoder:
    """The encoder of a module the store names (its shipped profile, engine.device.jetson.identity's
    table); `fallback` (the --profile's) for a module no profile is known for (logged)."""
    from engine.device.jetson.identity import MODULES
    from engine.device.twin.profile import load_profile

    profile = next((prof for name, prof in MODULES.values() if name == module), None)
    if profile is None:
        if module != fallback.module:
            log.warning("no device profile of module %s: its rows are encoded against %s", module, fallback.profile)
        return fallback
    if profile == fallback.profile:
        return fallback
    return SettingEncoder.from_profile(load_profile(profile))


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
                      "learn across them, the module's figures as features")


def concat(parts: Sequence[Dataset], *, module_encoders: Mapping[str, SettingEncoder] | None = None) -> Dataset:
    """Datasets (engine.selector.dataset.Dataset) as one: their rows in order, notes and devices once each,
    the modules of their rows kept (`module_encoders`: rows of several modules, each module's encoder)."""
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
        row_modules=sum((p.row_modules for p in parts), ()), module_encoders=dict(module_encoders or {}),
    )

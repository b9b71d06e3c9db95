"""The twin ensemble's figures of a workload, kept on disk between processes.

An ensemble (engine.device.twin.ensemble) simulates each of 32 plausible profiles at every setting
and padded length: about a second of CPU that every `select` of the same workload paid again, in a
fresh process, for the same numbers. It is a pure function of its inputs and of the code that
computes it, so it is stored under a digest of exactly those: the step mix (each part's trace and
weight), the profile's every value, the settings, members, seed and rails, and the source of the
modules that turn them into figures (any edit to the twin's physics is a different key) with the
Python and NumPy versions. An entry holds each member's floats as JSON writes them (repr: they read
back bit-identical). An unreadable entry, or one for another key, is computed again; the cache is an
optimisation, so failing to write one only logs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import sys
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from engine.core.cachefile import store_cache_json
from engine.core.jsontypes import JsonObject, JsonValue
from engine.core.paths import cache_dir
from engine.core.trace import StepMix, StepTrace, as_mix
from engine.device.setting import DvfsSetting

if TYPE_CHECKING:
    from engine.device.twin.profile import TwinProfile

log = logging.getLogger(__name__)

ENTRY_VERSION = 1  # the layout of an entry

# What an ensemble's figures are computed by: fast mode, the governors and their dynamics, the model
# and its phases, the profile's sampling, the settings' control states, the rails' totals.
_CODE = ("engine/device/twin/ensemble.py", "engine/device/twin/fast.py", "engine/device/twin/governors.py",
         "engine/device/twin/dynamics.py", "engine/device/twin/model.py", "engine/device/twin/phases.py",
         "engine/device/twin/params.py", "engine/device/twin/thermal.py", "engine/device/setting.py",
         "engine/device/baseline.py", "engine/device/rails.py", "engine/core/clocks.py",
         "engine/core/measurement.py", "engine/core/trace.py")


@dataclasses.dataclass(frozen=True)
class Figures:
    """Each member's figures at each setting: what an Ensemble holds beyond its inputs."""

    energy_ps: tuple[tuple[float, ...], ...]
    time_ps: tuple[tuple[float, ...], ...]
    gpu_hz: tuple[tuple[int, ...], ...]


@lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of the source that computes an ensemble, with the interpreter's and NumPy's versions."""
    import numpy

    root = Path(__file__).resolve().parents[3]
    h = hashlib.sha256(f"{sys.version}|numpy {numpy.__version__}|".encode())
    for rel in _CODE:
        h.update(rel.encode())
        with contextlib.suppress(OSError):  # a file that is not there (a trimmed install) is part of the key too
            h.update((root / rel).read_bytes())
    return h.hexdigest()


def ensemble_key(trace: StepTrace | StepMix, profile: TwinProfile, settings: Sequence[DvfsSetting], members: int,
                 seed: int, rails: Sequence[str] | None) -> JsonObject:
    """Everything an ensemble's figures depend on (its level only summarises them: not part of it)."""
    mix = as_mix(trace)
    # repr of the frozen profile: every value, floats as they round-trip; where it was read from is not a value
    shown = repr(dataclasses.replace(profile, source_path=""))
    return {"entry_version": ENTRY_VERSION, "code": code_digest(),
            "mix": [[w, t.to_json()] for w, t in mix.parts],
            "profile": hashlib.sha256(shown.encode()).hexdigest(), "profile_name": str(profile.name),
            "settings": [repr(s) for s in settings], "members": members, "seed": seed,
            "rails": None if rails is None else list(rails)}


def entry_path(key: JsonObject, root: Path | None = None) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return (root or cache_dir()) / "ensembles" / f"{digest}.json"


def cached_figures(key: JsonObject) -> Figures | None:
    """The figures stored under `key`, or None (none there, unreadable, or another key's)."""
    path = entry_path(key)
    try:
        data = json.loads(path.read_text())
        if data["key"] != key:  # a digest collision, or an entry edited by hand
            return None
        figures = Figures(tuple(tuple(float(v) for v in row) for row in data["energy_ps"]),
                          tuple(tuple(float(v) for v in row) for row in data["time_ps"]),
                          tuple(tuple(int(v) for v in row) for row in data["gpu_hz"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("ignoring unreadable cached ensemble %s (%s); computing it again", path, exc)
        return None
    shape = {len(row) for rows in (figures.energy_ps, figures.time_ps, figures.gpu_hz) for row in rows}
    if len(figures.energy_ps) != key["members"] or shape != {len(_as_list(key["settings"]))}:
        log.warning("ignoring cached ensemble %s: not %s members x %d settings", path, key["members"],
                    len(_as_list(key["settings"])))
        return None
    return figures


def store_figures(key: JsonObject, figures: Figures) -> None:
    """Write the entry atomically; a failure only logs (the next process computes it again)."""
    body = {"key": key, "energy_ps": [list(r) for r in figures.energy_ps],
            "time_ps": [list(r) for r in figures.time_ps], "gpu_hz": [list(r) for r in figures.gpu_hz]}
    store_cache_json(entry_path(key), body, "ensemble")


def _as_list(value: JsonValue) -> list[JsonValue]:
    return value if isinstance(value, list) else []

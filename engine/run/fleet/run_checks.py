"""What `fleet run`'s policies need from the driver, found (or refused) before any board starts:
the oracle's stored sweeps of the workload on a board's module, the `ml` policy's selector."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from engine.core.constants import DEFAULT_PADDING, PAD_FLAGS
from engine.core.errors import ConfigError
from engine.run.experiment import ExperimentSpec
from engine.run.fleet.model import ExperimentPlan, SelectorFiles
from engine.workload.trace.loop import default_loop

if TYPE_CHECKING:
    from engine.results.records import DeviceRecord
    from engine.results.store import Store
    from engine.results.store.sweep_tables import FinishedSweep

RAILS_ALL = "all"  # a sweep's space without "rails" totals every rail (engine.results.sweeps)


def same_module(a: DeviceRecord, b: DeviceRecord) -> bool:
    """Two DeviceRecords whose results count as one module's (the store's device scope "module")."""
    return (a.board, a.module, a.l4t, a.jetpack, a.profile, a.is_twin) == \
        (b.board, b.module, b.l4t, b.jetpack, b.profile, b.is_twin)


def oracle_seeds(store: Store, plan: ExperimentPlan, spec: ExperimentSpec) -> tuple[FinishedSweep, ...]:
    """The store's sweeps of the plan's workload on any board of its module with its source and rails,
    as FinishedSweeps to store on the board (what stored_points would read here); read-only."""
    from engine.results.store.sweep_tables import FinishedSweep

    found = store.find_workload(plan.workload.key)
    if found is None:
        return ()
    workload_id, workload = found
    sweeps = [s for s in store.list_sweeps() if s.workload_id == workload_id and s.source == plan.source
              and same_module(store.get_device(s.device_id), plan.device)]
    matching = [s for s in sweeps if s.space.get("rails", RAILS_ALL) == spec.rails]
    if sweeps and not matching:
        raise ConfigError(f"the store's sweeps of {spec.workload.model}/{spec.workload.task} on {plan.device.module} "
                          f"total other "
                          f"rails than --rails {spec.rails}",
                          f"sweep again with --rails {spec.rails}, or run with the sweep's --rails")
    return tuple(FinishedSweep(workload=workload, space=dict(s.space), points=tuple(store.sweep_points(s.id)),
                               repeats=s.repeats, source=s.source, label=s.label, warmup_steps=s.warmup_steps,
                               steps=s.steps)
                 for s in sorted(matching, key=lambda s: s.id))


def missing_oracle_error(spec: ExperimentSpec, modules: Sequence[str]) -> ConfigError:
    """No board's module has a stored sweep of the workload: say which `fleet sweep` makes one."""
    w = spec.workload
    args = ["--model", w.model, "--task", w.task]
    for flag, value in (("--batch-size", w.batch_size), ("--max-seq-len", w.seq_len)):
        if value is not None:
            args += [flag, str(value)]
    if w.mode != "full":
        args += ["--mode", w.mode]
    if spec.rails != RAILS_ALL:
        args += ["--rails", spec.rails]
    if w.padding != DEFAULT_PADDING:
        args += ["--pad", next((flag for flag, p in PAD_FLAGS.items() if p == w.padding), w.padding)]
    if w.loop != default_loop(trains=spec.trains):  # the sweep it names trains as this run does (--fast if not)
        args += ["--loop", w.loop]
    fast = " --fast" if spec.simulate else ""
    return ConfigError(
        f"the oracle policy has no stored sweep of {w.model}/{w.task} on a board of this fleet's module(s) "
        f"({', '.join(modules)}) in this results store",
        f"sweep it on the fleet first, into the same --db: `slm-dvfs fleet sweep (--address HEAD:6379 | --twins N) "
        f"{shlex.join(args)}{fast}`, then run the oracle again")


def selector_files(spec: ExperimentSpec) -> SelectorFiles:
    """The `ml` policy's selector (its spec's, else the user's, else the shipped one), checked here as a
    local run checks it (origin, digest, features), read to send to a board."""
    from engine.selector.persistence import resolve_selector_path, verify_selector_file
    from engine.selector.policy import parse_ml_arg

    _name, _colon, arg = spec.policy.partition(":")
    explicit = parse_ml_arg(arg.strip() or None).get("selector") or dict(spec.policy_options).get("selector")
    if explicit is not None and not isinstance(explicit, (str, os.PathLike)):  # a library caller's loaded selector
        raise ConfigError("a fleet run sends the ml policy's selector to its boards as a file",
                          "give the selector's path (ml:selector=PATH), not a loaded selector")
    path = resolve_selector_path(explicit)  # no selector, or an untrusted one: refused with the remedy
    joblib = path.read_bytes()
    verify_selector_file(path, joblib)
    compact = path.with_suffix(".npz")
    return SelectorFiles(name=Path(path).name, joblib=joblib, sidecar=path.with_suffix(".json").read_bytes(),
                         compact=compact.read_bytes() if compact.is_file() else None, origin=str(path))

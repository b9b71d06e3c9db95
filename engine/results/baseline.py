"""The baseline of a run, from the store: one lookup for the experiment's --reuse-baseline and the
TUI's Compare page, and the baseline's name. The baseline is the board's uncapped mode with its
dynamic governors (engine.device.baseline): MAXN, mode 0, on an AGX Orin; MAXN_SUPER, mode 2, on an
Orin Nano 8GB. A baseline run is one of policy `maxn`, whatever its mode's id, so a MAXN run of mode 0
stored before the mode was named is still the AGX Orin's baseline."""

from __future__ import annotations

import logging
import shlex
from typing import TYPE_CHECKING, Mapping

from engine.core.errors import ProfileError, SlmDvfsError
from engine.core.provenance import Source
from engine.device.baseline import AGX_MAXN, Baseline, profile_baseline
from engine.device.jetson.identity import profile_of_module
from engine.results.records import DeviceRecord, RunRecord
from engine.workload.lora import LoraSettings
from engine.workload.trace.loop import default_loop

if TYPE_CHECKING:  # annotations only: engine.results.store imports the results modules
    from engine.results.store import Store

log = logging.getLogger(__name__)

BASELINE_POLICY = "maxn"
MODE_NAME_KEY = "nvpmodel_name"  # a baseline run's stored setting names its mode (absent before: MAXN)


def stored_mode_name(setting: Mapping[str, object] | None) -> str:
    """The mode name a baseline run's stored setting carries; `MAXN` for one stored before modes were named."""
    stored = (setting or {}).get(MODE_NAME_KEY)
    return stored if isinstance(stored, str) and stored else "MAXN"


def mode_text(setting: Mapping[str, object] | None, name: str | None = None) -> str:
    """How a baseline is named in the UI and reports: `MAXN_SUPER (mode 2)`, from a stored setting (its
    `nvpmodel` and MODE_NAME_KEY) or `name`; a run stored before modes were named is `MAXN (mode N)`."""
    label = name or stored_mode_name(setting)
    mode_id = (setting or {}).get("nvpmodel")
    return f"{label} (mode {mode_id})" if isinstance(mode_id, int) else label


def device_baseline(device: DeviceRecord | None, space: Mapping[str, object] | None = None) -> Baseline:
    """The baseline of a stored device, for a stored sweep's points: its twin profile's, else the profile an
    imported sweep's `space` names (import-sweep --profile), else its module's shipped profile's (a board's
    record names its module), else the AGX Orin's MAXN (mode 0), which a record from before modules were
    named means."""
    imported = (space or {}).get("profile")
    name = imported if isinstance(imported, str) else None
    if device is not None:
        name = device.profile or name or profile_of_module(device.module)
    if not name:
        return AGX_MAXN
    from engine.device.twin.profile import load_profile  # lazy: the profile loader reads TOML files

    try:
        return profile_baseline(load_profile(name))
    except ProfileError:  # a profile no longer shipped: what the record meant before modules were named
        return AGX_MAXN


def matching_baseline(store: Store, *, workload_key: str, device_id: int, source: Source | str | None,
                      steps: int | None, seed: int | None, rails_preset: str | None, simulated: bool,
                      exclude: int | None = None, scope: str = "board") -> RunRecord | None:
    """The newest finished MAXN run of this workload on this board (`scope="module"`: on any board of
    its module) with energy figures, the same steps, seed (None: any), rail preset and kind (simulated
    or trained); `exclude` is never it."""
    for rec in store.find_runs(workload_key, device_id, policy=BASELINE_POLICY, steps=steps, seed=seed,
                               source=source, scope=scope):
        if rec.id != exclude and rec.rails == rails_preset and rec.simulated == simulated and rec.energy_j:
            return rec
    return None


def find_baseline(store: Store, run: RunRecord) -> RunRecord | None:
    """The MAXN run this one was compared with (a recorded baseline of another policy is none), else matching_baseline for the run, else the
    newest MAXN run of its workload on its board of the same kind (simulated or trained) and
    rails, whatever its steps and seed (the Compare page then compares per sample), else the
    same on another board of its module (`compare.board_note` labels it); None when there is
    none or the run is a MAXN run itself."""
    for c in reversed(store.comparisons_for(run.id)):
        if c.run_id == run.id:
            try:
                recorded = store.get_run(c.baseline_run_id)
            except SlmDvfsError:  # deleted since: look further
                log.debug("baseline run %d of comparison %s is gone", c.baseline_run_id, c.id)
                continue
            if recorded.policy == BASELINE_POLICY:  # an older store may have recorded another policy's run
                return recorded
    if run.policy == BASELINE_POLICY or run.workload is None or run.device_id is None:
        return None
    key = run.workload.key  # the store's one key: with its padding and its LoRA / checkpointing variant
    exact = matching_baseline(store, workload_key=key, device_id=run.device_id, source=run.source, steps=run.steps,
                              seed=run.seed, rails_preset=run.rails, simulated=run.simulated, exclude=run.id)
    if exact is not None:
        return exact
    for scope in ("board", "module"):
        found = matching_baseline(store, workload_key=key, device_id=run.device_id, source=run.source, steps=None,
                                  seed=None, rails_preset=run.rails, simulated=run.simulated, exclude=run.id,
                                  scope=scope)
        if found is not None:
            return found
    return None


def maxn_command(run: RunRecord) -> str:
    """The `slm-dvfs run` that records a MAXN run `run` compares with: its workload (model, task, shape,
    precision, mode, LoRA, checkpointing, padding, loop), the twin's profile or the board, simulated or trained,
    its steps, seed and rails, spelled out (none of them is in `slm-dvfs runs`' listing)."""
    flags = ["slm-dvfs", "run"]
    w = run.workload
    if w is None:
        flags += ["--model", "M", "--task", "T"]
    else:
        flags += ["--model", w.model, "--task", w.task, "--batch-size", str(w.batch_size),
                  "--max-seq-len", str(w.seq_len), "--precision", w.precision]
        if w.mode != "full":
            flags += ["--mode", w.mode]
        if w.lora is not None:  # the settings that are not the defaults
            lora, usual = w.lora, LoraSettings()
            for flag, value, default in (("--lora-rank", lora.rank, usual.rank), ("--lora-alpha", lora.alpha, usual.alpha),
                                         ("--lora-dropout", lora.dropout, usual.dropout),
                                         ("--lora-targets", ",".join(lora.targets), "")):
                if value != default:
                    flags += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
        if w.grad_checkpointing:
            flags.append("--grad-checkpointing")
        flags += ["--pad", "max" if w.padding == "max_length" else w.padding]
        if w.loop != default_loop(trains=not run.simulated):  # the run command's own default goes unsaid
            flags += ["--loop", w.loop]
    if run.device is not None and run.device.is_twin:
        flags += ["--twin"] + ([run.device.profile] if run.device.profile else [])
    if run.simulated:
        flags.append("--simulate")
    if run.steps:
        flags += ["--steps", str(run.steps)]
    if run.seed is not None:
        flags += ["--seed", str(run.seed)]
    if run.rails:
        flags += ["--rails", run.rails]
    return " ".join(shlex.quote(f) for f in flags + ["--policy", BASELINE_POLICY])

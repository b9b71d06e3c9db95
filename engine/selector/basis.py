"""What a selector's choices rest on: the data it learnt from, in one line.

A selector trained on the twin zoo knows the twin; one trained or adapted on a board's sweeps
knows that board. `fit_selector` records the basis in the selector's `training` metadata (so in
its sidecar and its compact form): the twin and measured workloads and points, the profile, the
boards, the weight of a measured row, and for a transferred selector its base. A file saved
before the basis was recorded gets one derived from what it did record (source, rows,
workloads, profile, the command): the shipped default reads "twin zoo (shipped with slm-dvfs: learnt on the
twin, from no board's measurements)".

`select` prints `line()`, `train-selector` prints it on save, the TUI shows `short()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from engine.core.jsontypes import JsonObject, JsonValue

if TYPE_CHECKING:
    from engine.selector.selector import Selector

BASIS_VERSION = 1


@dataclass(frozen=True)
class DataBasis:
    origin: str  # "twin zoo" | "store sweeps" | "transfer"
    twin_workloads: int = 0
    twin_points: int = 0
    measured_workloads: int = 0
    measured_points: int = 0
    energy_only_points: int = 0  # of the measured points, those without a time
    profile: str | None = None
    devices: tuple[str, ...] = ()
    measured_weight: float | None = None  # a measured row's weight against a twin row's 1
    base: Mapping[str, JsonValue] | None = None  # transfer: the base selector's file, digest and basis line
    modules: tuple[str, ...] = ()  # the modules its store sweeps were of (none recorded: the twin zoo, older files)
    across_modules: bool = False  # learnt across modules, their figures as features (`--across-modules`, the zoos of several --twin)
    recorded: bool = True  # False: derived from an older selector's metadata
    note: str = ""
    extra: Mapping[str, JsonValue] = field(default_factory=dict)

    @property
    def measured(self) -> bool:
        return self.measured_points > 0

    def _twin(self) -> str:
        where = "twin zoo" if self.origin in ("twin zoo", "transfer") or not self.measured else "twin sweeps"
        return f"{where} ({self.twin_workloads} workloads, {self.twin_points} points)"

    def _measured(self) -> str:
        only = f", {self.energy_only_points} energy-only" if self.energy_only_points else ""
        boards = f" on {', '.join(self.devices)}" if self.devices else ""
        return f"{self.measured_workloads} measured workload(s) ({self.measured_points} points{only}){boards}"

    def line(self) -> str:
        """One line: which data the selector's choices rest on, labelled by source."""
        profile = f", profile {self.profile}" if self.profile and not self.across_modules else ""
        if self.across_modules:  # each module's own profile, named by its module
            profile += f", across modules {', '.join(self.modules)}: their figures as features"
        elif self.modules:
            profile += f", module {', '.join(self.modules)}"
        note = f" ({self.note})" if self.note else ""
        if self.origin == "transfer":
            base = (self.base or {}).get("basis") or "its base selector"
            return (f"{self._measured()} [measured] adapting {base} — "
                    f"transfer from {(self.base or {}).get('name', 'a base selector')}{note}")
        if not self.measured and not self.twin_points:  # an older file that did not record the split
            return f"{self.origin}{profile}{note}"
        if self.measured and self.twin_points:
            weight = f", each weighted {self.measured_weight:g}x" if self.measured_weight else ""
            return f"{self._measured()} [measured]{weight} over {self._twin()} [twin]{profile}{note}"
        if self.measured:
            return f"{self._measured()} [measured]{profile}{note}"
        return f"{self._twin()} [twin]{profile}{note}"

    def short(self) -> str:
        """A few words for the TUI: twin zoo | N measured + twin | transfer (N measured)."""
        if self.origin == "transfer":
            return f"twin + {self.measured_workloads} measured sweep(s), transfer"
        if self.measured and self.twin_points:
            return f"{self.measured_workloads} measured + twin"
        if self.measured:
            return f"{self.measured_workloads} measured sweep(s)"
        return "twin zoo" if self.origin == "twin zoo" else "twin sweeps"

    def to_json(self) -> JsonObject:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "extra"}
        out["devices"] = list(self.devices)
        out["modules"] = list(self.modules)
        out["base"] = None if self.base is None else dict(self.base)
        out["version"] = BASIS_VERSION
        out["line"] = self.line()
        return {**dict(self.extra), **out}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "DataBasis":
        names = set(cls.__dataclass_fields__) - {"extra", "devices", "base", "modules"}
        kw = {k: data[k] for k in names if k in data}
        return cls(**kw, devices=tuple(data.get("devices") or ()), base=data.get("base"),
                   modules=tuple(data.get("modules") or ()))


def from_training(summary: Mapping[str, Any], *, command: JsonObject | None = None,
                  measured_weight: float | None = None, base: Mapping[str, JsonValue] | None = None) -> DataBasis:
    """The basis of a selector fitted now, from its dataset's summary (Dataset.summary())."""
    zoo = isinstance(command, Mapping) and bool(command.get("from_twin_zoo"))
    return DataBasis(
        origin="transfer" if base is not None else ("twin zoo" if zoo else "store sweeps"),
        twin_workloads=int(summary.get("twin_workloads", 0)), twin_points=int(summary.get("twin_rows", 0)),
        measured_workloads=int(summary.get("measured_workloads", 0)),
        measured_points=int(summary.get("measured_rows", 0)),
        energy_only_points=int(summary.get("energy_only_rows", 0)), profile=summary.get("profile"),
        devices=tuple(summary.get("devices") or ()), measured_weight=measured_weight, base=base,
        modules=tuple(summary.get("modules") or ()), across_modules=bool(summary.get("across_modules")),
    )


SHIPPED_NOTE = "shipped with slm-dvfs: learnt on the twin, from no board's measurements"


def basis_of(selector: Selector) -> DataBasis:
    """The selector's recorded basis, or one derived from an older file's metadata."""
    training = getattr(selector, "training", {}) or {}
    path = getattr(selector, "path", None)
    shipped = False
    if path is not None:
        from engine.core.paths import profiles_dir  # persistence.shipped_selector_dir (which imports this)

        try:
            shipped = Path(path).resolve().parent == (profiles_dir() / "selectors").resolve()
        except OSError:
            shipped = False
    if isinstance(training.get("basis"), Mapping):
        recorded = DataBasis.from_json(training["basis"])
        if shipped and not recorded.note and not recorded.measured_points:
            return replace(recorded, note=SHIPPED_NOTE)  # where it lies says what it means for the user
        return recorded
    source = str(getattr(selector, "source", training.get("source", "")))
    command = training.get("command")
    zoo = isinstance(command, Mapping) and bool(command.get("from_twin_zoo"))
    rows, workloads = int(training.get("rows") or 0), int(training.get("workloads") or 0)
    # what the derivation means for the user, not when the basis began to be recorded
    note = SHIPPED_NOTE if shipped else "counts from the file's metadata: its data was not itemised by source and board"
    profile = training.get("profile")
    if source == "measured":
        return DataBasis("store sweeps", measured_workloads=workloads, measured_points=rows, profile=profile,
                         recorded=False, note=note)
    if source == "both":  # the split between sources was not recorded
        return DataBasis("store sweeps", profile=profile, recorded=False,
                         note=f"{note}: measured and twin store sweeps, {workloads} workloads and {rows} points "
                              "in all, split not recorded")
    return DataBasis("twin zoo" if zoo or shipped else "store sweeps", twin_workloads=workloads, twin_points=rows,
                     profile=profile, recorded=False, note=note)


__all__ = ["BASIS_VERSION", "DataBasis", "basis_of", "from_training"]

"""Sweeps from the app (start or resume, progress, the heat map) and selector training."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import work

from engine.device.baseline import AGX_MAXN
from engine.core.errors import SlmDvfsError
from engine.core.provenance import Source, obtained
from engine.results.format import board_estimate_text, versus_text
from tui.actions.experiments import ENGINE
from tui.bridge import EventBridge
from tui.messages import (
    EngineFailed,
    SelectorTrained,
    SelectorTrainingRequested,
    SweepDone,
    SweepProgress,
    SweepRequested,
)
from tui.screens.modals import ConfirmScreen
from tui.state import AppState, SweepOrder
from tui.sweep_model import SweepTracker, SweepView

if TYPE_CHECKING:  # the engine's run pipeline and the selector's training load when used
    from engine.results.store import Store
    from engine.run.sweep import SweepSpec
    from engine.selector.candidates import CandidateSpec
    from engine.selector.training import Trained
    from engine.workload.training.loop import TrainControl
    from tui.forms import SetupValues
    from tui.sweep_model import HeatMap


class SweepActions(AppState):
    """Mixin of SlmDvfsApp."""

    # ------------------------------------------------------------------ what Setup's policy needs
    def sweeps_of(self, values: SetupValues) -> int:
        """How many of the store's sweeps of this device (and source) measured Setup's workload:
        the workload found by the key the engine's oracle looks it up by (engine.results.sweeps.
        stored_points), with the zoo's defaults for blank fields and Setup's dynamic padding."""
        from engine.results.store import DeviceRecord
        from tui.forms import workload_spec

        store = self.store
        if store is None or self.identity is None:
            return 0
        device = DeviceRecord.from_identity(self.identity)
        try:
            found = store.find_workload(workload_spec(values).key)
            if found is None:
                return 0
            count = 0
            for sweep in store.list_sweeps():
                if sweep.workload_id != found[0] or sweep.source != self.source:
                    continue
                dev = store.get_device(sweep.device_id)
                if (dev.board, dev.module, dev.profile) == (device.board, device.module, device.profile) \
                        and store.completed_points(sweep.id):
                    count += 1
        except (SlmDvfsError, ValueError):
            return 0
        return count

    def policy_warning(self, values: SetupValues) -> str:
        """What Setup says under the form about its policy: what it still needs, or ""."""
        from tui.forms import policy_needs
        from tui.selection import TRAIN_COMMAND, selector_available

        need = policy_needs(values.policy)
        workload = f"{values.model.strip()}/{values.task}"
        if need == "sweep" and not self.sweeps_of(values):
            where = "s offers a fast sweep on the twin first" if self.is_twin else "run one on the Sweep page (6)"
            return f"⚠ oracle needs a sweep of {workload} on this device; the store has none: {where}"
        if need == "selector" and not selector_available():
            return (f"⚠ ml needs a trained selector; none found: sweep on page 6 then train (t), "
                    f"or `{TRAIN_COMMAND}`")
        return ""

    def policy_ready(self, values: SetupValues) -> bool:
        """Before Setup starts a run: True when its policy has what it needs; otherwise says so
        and offers the way to get it (a fast sweep on the twin, the Sweep page on a board)."""
        from tui.forms import policy_needs

        need = policy_needs(values.policy)
        if need == "sweep" and not self.sweeps_of(values):
            workload = f"{values.model.strip()}/{values.task}"
            if self.is_twin:
                self.push_screen(
                    ConfirmScreen(f"oracle needs a sweep of {workload}: run a fast one now?",
                                  "The store has no sweep of this workload on this device. A fast sweep computes "
                                  "each GPU clock's point from the twin's model (seconds, no training) on the "
                                  "Sweep page (6); start the run again when it has finished.", yes="Sweep"),
                    lambda ok: self.sweep_for_setup(values, fast=True) if ok else None,
                )
            else:
                self.push_screen(
                    ConfirmScreen(f"oracle needs a sweep of {workload}: open the Sweep page?",
                                  "The store has no sweep of this workload on this board. Sweep it on the "
                                  "Sweep page (6) (every setting is applied in turn), then start the run again.",
                                  yes="Open Sweep"),
                    lambda ok: self.sweep_for_setup(values, fast=False, start=False) if ok else None,
                )
            return False
        if need == "selector" and self.policy_warning(values):
            self.notify(self.policy_warning(values).lstrip("⚠ "), title="Cannot start", severity="error")
            return False
        return True

    def sweep_for_setup(self, values: SetupValues, *, fast: bool, start: bool = True) -> None:
        """The Sweep page on Setup's workload; with `start`, its sweep started (fast on the twin)."""
        self.sweep_for = values.policy.strip() if start else None  # said when the sweep is done
        serial = self.sweep_order.serial + 1 if self.sweep_order is not None else 1
        self.sweep_order = SweepOrder(values, fast, start, serial)  # the page takes it when shown
        self.action_page("sweep")

    def action_start_sweep(self) -> None:
        """The palette's Start or resume sweep: the Sweep page's own `s` (its checks first), once shown."""
        self.action_page("sweep")
        self.call_after_refresh(self.run_action, "start", self.get_screen("sweep"))

    def on_sweep_requested(self, message: SweepRequested) -> None:
        if message.on_fleet:
            self.request_fleet_sweep(message.values)
        else:
            self.request_sweep(message.values)

    def request_sweep(self, values: dict[str, Any]) -> None:
        from tui.forms import sweep_spec

        if self._refuse_if_busy():
            return
        try:
            spec = sweep_spec(values["model"], values["task"], values.get("workload", {}), space=values["space"],
                              warmup_steps=int(values["warmup"]), steps=int(values["steps"]),
                              repeats=int(values["repeats"]), fast=bool(values["fast"]) and self.is_twin,
                              twin=getattr(self.identity, "profile", None) if self.is_twin else None)
            spec.validate()
        except (SlmDvfsError, ValueError) as exc:
            self.notify(str(exc), title="Cannot start the sweep", severity="error")
            return
        if self.is_twin:
            self.start_sweep(spec)
            return

        def answer(ok: bool | None) -> None:
            if ok:
                self.start_sweep(spec)

        self.push_screen(
            ConfirmScreen("Sweep the board's clocks?",
                          f"Every setting of the {spec.space} space is applied in turn; the clocks are restored "
                          "when the sweep ends, is cancelled, or on quit.", yes="Sweep"), answer)

    def start_sweep(self, spec: SweepSpec) -> TrainControl | None:
        from engine.workload.training.loop import TrainControl

        store = self.store
        if self._refuse_if_busy() or store is None:
            return None
        tracker = SweepTracker(self.source, self.baseline)
        tracker.note(f"sweep of {spec.workload.model}/{spec.workload.task} over {spec.space}"
                     + (" (fast: the twin's model, no training)" if spec.fast else ""))
        self.sweep_tracker = tracker
        self.sweep_bridge = EventBridge(tracker, lambda: self.post_message(SweepProgress()),
                                        min_interval_s=self.run_refresh_s)
        self.control = control = TrainControl()
        self.engine_busy = "sweep"
        self.pinned_by_us = not spec.fast
        self.sweep_view = tracker.view()
        self.sweep_worker(spec, store, control, self.sweep_bridge)
        return control

    @work(thread=True, exclusive=True, exit_on_error=False, group=ENGINE)
    def sweep_worker(self, spec: SweepSpec, store: Store, control: TrainControl, bridge: EventBridge) -> None:
        from engine.run.sweep import run_sweep

        try:
            result = run_sweep(spec, store=store, callbacks=[bridge], control=control, session=self.session)
        except BaseException as exc:  # noqa: BLE001 - shown in the app
            self.post_message(EngineFailed("sweep", exc))
            return
        self.post_message(SweepDone(result))

    def on_sweep_progress(self, message: SweepProgress) -> None:
        if self.sweep_bridge is not None:
            self.sweep_bridge.taken()
        if self.sweep_tracker is None:
            return
        self.sweep_view = self.sweep_tracker.view()
        if self.engine_busy == "fleet sweep":
            self.fleet_changed()  # the boards' `running` column follows the sweep's events

    def on_sweep_done(self, message: SweepDone) -> None:
        from tui.sweep_model import from_summaries

        result = message.result
        line = (f"sweep {result.sweep_id} {result.status}: {result.measured} {obtained(result.source)} "
                f"{'on the twin' if result.source is Source.TWIN else 'on the board'}, {result.resumed} resumed "
                f"of {result.settings * result.spec.repeats} points")
        self._engine_idle(line + ("; starting it again with the same parameters resumes it"
                                  if result.status != "finished" else ""))
        vs = result.vs_maxn  # the engine's, as the CLI's text and --json give it
        base = result.baseline or AGX_MAXN  # the board's uncapped mode: MAXN_SUPER (mode 2) on an Orin Nano
        if vs is not None and result.optimum is not None:
            line += (f"\noptimum {result.optimum.setting.label()}: "
                     f"{versus_text(vs.saving_pct, vs.slowdown_pct, than=base.label)} per sample [{vs.source.value}]")
            if vs.interval is not None:
                line += f"\n{board_estimate_text(vs.saving_pct, vs.interval, base.name)}"
        if isinstance(self.sweep_tracker, SweepTracker):  # a local sweep's (a fleet sweep ends in FleetSweepDone)
            heat = from_summaries(result.points, result.source, base)
            self.sweep_tracker.finish(result.status, heat, result.sweep_id, line,
                                      stored=self._stored_view(result.sweep_id, heat))
            self.sweep_view = self.sweep_tracker.view()
        policy, self.sweep_for = self.sweep_for, None
        if policy and result.status == "finished":
            line += f"\n{policy} has its sweep now: start the run on Setup (2)"
        self.notify(line, title="Sweep " + result.status)

    def _stored_view(self, sweep_id: int | None, heat: HeatMap) -> SweepView | None:
        """A sweep that has ended as the store keeps it (its counts, status and workload); None when
        it cannot be read (the tracker then keeps this invocation's counts)."""
        from tui.sweep_model import stored_view

        if sweep_id is None or self.store is None:
            return None
        try:
            return stored_view(self.store, sweep_id, (), heat=heat)
        except SlmDvfsError:
            return None

    def open_sweep(self, sweep_id: int) -> None:
        """A stored sweep on the Sweep page: its heat map, its points stored of those planned, and its
        own workload and sweep parameters in the form (not Setup's), so that the figures never sit
        beside another workload and `s` sweeps this one (resuming it if unfinished)."""
        from engine.results.format import sweep_state
        from tui.sweep_model import stored_view

        if self.store is None:
            return
        try:
            sweep = self.store.get_sweep(sweep_id)
            view = stored_view(self.store, sweep_id, (f"sweep {sweep_id} from the store ({sweep_state(sweep)})",),
                               opened=True)
        except SlmDvfsError as exc:
            self.notify(exc.what, title="Cannot open the sweep", severity="error")
            return
        self.sweep_view = view
        self.action_page("sweep")

    # ------------------------------------------------------------------ selector training
    def action_train_selector(self) -> None:
        self.train_selector()

    def on_selector_training_requested(self, message: SelectorTrainingRequested) -> None:
        self.train_selector()

    def train_selector(self) -> None:
        store = self.store
        if self._refuse_if_busy() or store is None:
            return
        self.engine_busy = "selector training"
        self.notify("training the selector on this store's sweeps (quick candidates); this takes a while")
        self.train_worker(store, self.source.value, getattr(self.identity, "profile", None) or "agx-orin-64gb")

    @work(thread=True, exclusive=True, exit_on_error=False, group=ENGINE)
    def train_worker(self, store: Store, source: str, profile: str) -> None:
        try:
            path, trained = train_for_app(store, source, profile)
        except BaseException as exc:  # noqa: BLE001 - shown in the app
            self.post_message(EngineFailed("selector training", exc))
            return
        self.post_message(SelectorTrained(str(path), trained.selector.winner, len(trained.dataset), source,
                                          trained.selector.basis.line()))

    def on_selector_trained(self, message: SelectorTrained) -> None:
        self._engine_idle()
        rests = f"\nrests on {message.basis}" if message.basis else ""
        self.notify(f"winner {message.winner}, {message.rows} {message.source} rows; saved to {message.path}{rests}",
                    title="Selector trained")


def train_for_app(store: Store, source: str, profile: str,
                  candidates: Sequence[CandidateSpec] | None = None) -> tuple[Path, Trained]:
    """The train key's work, off the UI thread: the CLI's training path and defaults (space,
    rails), with quick candidates, so the same store trains the same selector; saved where
    `train-selector` saves. Returns the file and what was trained."""
    from engine.selector.candidates import default_candidates
    from engine.selector.persistence import save_selector
    from engine.selector.training import train_from_store

    trained = train_from_store(store, source=source, profile=profile,
                               candidates=candidates or default_candidates(small=True),
                               command={"from": "tui", "source": source})
    return save_selector(trained.selector), trained

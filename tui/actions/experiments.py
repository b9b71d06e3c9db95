"""Experiments from the app: start (asking first on a board), the worker, progress,
pause/resume, cancel, and the selector's preview before a run."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from textual import work

from engine.core.errors import SlmDvfsError
from engine.results.format import board_estimate_text, versus_text
from tui import forms
from tui.bridge import EventBridge
from tui.messages import EngineFailed, ExperimentDone, PreviewRequested, RunProgress, SelectorPreviewed
from tui.runstate import RunTracker
from tui.screens.modals import ConfirmScreen
from tui.state import AppState

if TYPE_CHECKING:  # the engine's run pipeline loads when a run starts
    from engine.results.store import Store
    from engine.run.experiment import ExperimentSpec
    from engine.run.harness import ListenerLike
    from engine.workload.training.loop import TrainControl
    from tui.forms import SetupValues

log = logging.getLogger(__name__)
ENGINE = "engine"  # the worker group of experiments, sweeps and selector training


class ExperimentActions(AppState):
    """Mixin of SlmDvfsApp."""

    # ------------------------------------------------------------------ experiments
    def request_start(self, values: SetupValues) -> None:
        """Start what the setup form describes, asking first on a real board."""
        from tui.forms import build_spec

        if self._refuse_if_busy():
            return
        try:
            spec = build_spec(values, twin_profile=getattr(self.identity, "profile", None), is_twin=self.is_twin)
        except SlmDvfsError as exc:
            self.notify(f"{exc.what}\n{exc.remedy}", title="Cannot start", severity="error")
            return
        if self.is_twin:
            self.start_experiment(spec)
            return
        runs = f"this policy and then {self.baseline_label}" if spec.compare else f"policy {spec.policy}"

        def answer(ok: bool | None) -> None:
            if ok:
                self.start_experiment(spec)

        self.push_screen(
            ConfirmScreen("Change the board's clocks?",
                          f"{runs} will set the clocks and power mode of this board for {spec.steps} steps; "
                          "they are restored when the run ends, is cancelled, or on quit.", yes="Start"), answer)

    def start_experiment(self, spec: ExperimentSpec, callbacks: Iterable[ListenerLike] = ()) -> TrainControl | None:
        """Run `spec` in the engine worker on this app's device; returns its TrainControl."""
        from engine.run.harness import rail_names
        from engine.workload.training.loop import TrainControl

        if self._refuse_if_busy():
            return None
        try:
            rails = rail_names(self.session, spec.rails)
        except SlmDvfsError as exc:
            self.notify(f"{exc.what}\n{exc.remedy}", title="Cannot start", severity="error")
            return None
        store = self.store
        if store is None:
            return None
        tracker = RunTracker(self.source, rails)
        tracker.note(f"preparing {spec.workload.model}/{spec.workload.task}: {spec.steps} steps, policy {spec.policy}"
                     + (f", then {self.baseline_label}" if spec.compare else ""))
        self.run_tracker = tracker
        self.run_bridge = EventBridge(tracker, lambda: self.post_message(RunProgress()),
                                      min_interval_s=self.run_refresh_s)
        self.control = control = TrainControl()
        self.polled.invalidate()
        self.engine_busy = "experiment"
        self.pinned_by_us = True
        self.selector_line = self.selector_short = "selector: asking…"
        self.runs_started += 1  # the Run page's log starts afresh
        self.run_view = tracker.view()
        self.action_page("run")  # unless a dialog is open
        self.experiment_worker(spec, store, control, self.run_bridge, tuple(callbacks))
        return control

    @work(thread=True, exclusive=True, exit_on_error=False, group=ENGINE)
    def experiment_worker(self, spec: ExperimentSpec, store: Store, control: TrainControl, bridge: EventBridge,
                          extra: tuple[ListenerLike, ...]) -> None:
        from engine.run.experiment import run_experiment
        from engine.workload.resolve import resolve_workload
        from tui.selection import SelectorPreview, preview_choice

        try:
            # once, for the preview and both runs; against this board's memory, before anything is built
            workload = resolve_workload(spec.workload, mem_total_bytes=self.mem_total)
            try:
                preview = preview_choice(spec, workload, board=self.board_profile)
            except Exception as exc:  # noqa: BLE001 - a preview never stops the run
                preview = SelectorPreview(False, note=f"could not ask the selector: {exc}")
            self.post_message(SelectorPreviewed(preview))
            result = run_experiment(spec, store=store, callbacks=[bridge, *extra], control=control,
                                    session=self.session, workload=workload, policies=self.policies)
        except BaseException as exc:  # noqa: BLE001 - shown in the app, never a crash to the shell
            self.post_message(EngineFailed("experiment", exc))
            return
        self.post_message(ExperimentDone(result))

    def on_run_progress(self, message: RunProgress) -> None:
        if self.run_bridge is not None:
            self.run_bridge.taken()
        if self.run_tracker is not None:
            self.run_view = self.run_tracker.view()

    def on_selector_previewed(self, message: SelectorPreviewed) -> None:
        self.selector_line = message.preview.line()
        self.selector_short = message.preview.short_forms()  # the Run page fits the one its width takes
        if self.run_tracker is not None and self.engine_busy == "experiment":
            self.run_tracker.note(self.selector_line)
            if self.run_bridge is not None:
                self.run_bridge.poke()

    def on_experiment_done(self, message: ExperimentDone) -> None:
        result = message.result
        self.last_result = result
        status = "cancelled" if result.cancelled else "finished"
        line = f"experiment {status}: run {result.run.run_id}"
        if result.cancelled:  # where it stopped, and what the store holds of it
            line = (f"experiment cancelled at step {result.run.steps} of {result.spec.steps}: run "
                    f"{result.run.run_id} is stored as cancelled")
        elif result.baseline is not None and result.baseline.cancelled:  # in its baseline run
            status = "cancelled"
            line = (f"experiment cancelled in its {result.baseline.mode_label} run, at step {result.baseline.steps} of "
                    f"{result.spec.steps}: run {result.baseline.run_id} is stored as cancelled (the policy's run "
                    f"{result.run.run_id} had finished)")
        if result.comparison is not None:
            c = result.comparison  # the engine's, as the CLI's text and --json give it
            than = result.baseline.mode_label if result.baseline is not None else "MAXN"
            line += f", {versus_text(c.saving_pct, c.slowdown_pct, than=than)} [{c.source.value}]"
        self._engine_idle(line)
        if result.comparison is not None and result.comparison.interval is not None:
            name = result.baseline.mode_name if result.baseline is not None else "MAXN"
            line += f"\n{board_estimate_text(result.comparison.saving_pct, result.comparison.interval, name)}"
        for note in result.notes:
            line += f"\nnote: {note}"
        if self.run_tracker is not None:
            self.run_tracker.end(status, line)
            self.run_view = self.run_tracker.view()
        if self._quitting:  # the app exits next: the Run page says how the run ended, nothing else opens
            return
        self.notify(line.split("\n")[0], title=f"Experiment {status}")
        if result.run.steps > 0 and self.store is not None:
            base = result.baseline.run_id if result.baseline is not None and not result.baseline.cancelled else None
            estimate = result.comparison.interval if result.comparison is not None else None
            self.open_run(result.run.run_id, base, switch=self.showing("run"), estimate=estimate)

    def on_engine_failed(self, message: EngineFailed) -> None:
        exc = message.error
        what = message.what
        if isinstance(exc, SlmDvfsError):
            text, detail = exc.what, self.app_remedy(exc)
        else:
            text, detail = f"{type(exc).__name__}: {exc}", "this is a bug: please report it with the log"
            log.error("the %s failed", what, exc_info=exc)
        line = f"{what} failed: {text}"
        self._engine_idle(line, failed=True)
        if what == "experiment" and self.run_tracker is not None:
            self.run_tracker.end("failed", line)
            self.run_view = self.run_tracker.view()
        if what in ("sweep", "fleet sweep") and self.sweep_tracker is not None:
            self.sweep_tracker.finish("failed", line=line)
            self.sweep_view = self.sweep_tracker.view()
        self.notify(f"{text}\n{detail}", title=f"The {what} failed", severity="error", timeout=15)

    def action_pause_resume(self) -> None:
        from engine.workload.training.loop import TrainControl

        control = self.control
        if not isinstance(control, TrainControl) or self.engine_busy != "experiment":  # a sweep's cannot pause
            self.notify("no run in progress", severity="warning")
            return
        if control.paused:
            control.resume()
            self.notify("resuming")
        else:
            control.pause()
            self.notify("pausing at the next step boundary")

    def action_cancel_run(self) -> None:
        if self.control is None:
            self.notify("nothing to cancel", severity="warning")
            return
        control = self.control
        what = self.engine_busy or "run"

        def answer(ok: bool | None) -> None:
            if ok:
                control.cancel(f"{what} cancelled from the TUI")
                self.notify(f"cancelling the {what} at the next step boundary; clocks will be restored")

        self.push_screen(ConfirmScreen(f"Cancel the {what}?",
                                       "It stops at the next step boundary and the clocks are restored.",
                                       yes="Cancel it", no="Keep running"), answer)

    def action_start_from_setup(self) -> None:
        """The palette's Start: Setup's own `s` (its checks first), once the page is shown."""
        self.action_page("setup")
        self.call_after_refresh(self.run_action, "start", self.get_screen("setup"))

    def action_predict_from_setup(self) -> None:
        self.action_page("setup")
        self.call_after_refresh(self.run_action, "predict", self.get_screen("setup"))

    # ------------------------------------------------------------------ the selector's preview
    def on_preview_requested(self, message: PreviewRequested) -> None:
        self.selector_key = forms.workload_key(message.values)
        self.request_preview(message.values)

    def request_preview(self, values: SetupValues) -> None:
        from tui.forms import build_spec

        try:
            spec = build_spec(values, twin_profile=getattr(self.identity, "profile", None), is_twin=self.is_twin)
        except SlmDvfsError as exc:
            self.notify(f"{exc.what}\n{exc.remedy}", title="Cannot ask the selector", severity="error")
            return
        self.selector_line = "selector: thinking… (tracing the workload)"
        self.preview_worker(spec)

    @work(thread=True, exclusive=True, exit_on_error=False, group="preview")
    def preview_worker(self, spec: ExperimentSpec) -> None:
        from tui.selection import SelectorPreview, preview_choice

        try:
            preview = preview_choice(spec, board=self.board_profile)
        except Exception as exc:  # noqa: BLE001 - said on the page
            preview = SelectorPreview(False, note=f"could not ask the selector: {exc}")
        self.post_message(SelectorPreviewed(preview))

"""Calibrating the twin from the app: the Sweep page's `c` fits the twin's profile to the store's
measured sweeps (engine.run.calibrate, as `slm-dvfs calibrate` does) and shows the fit report."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import work

from tui.actions.experiments import ENGINE
from tui.messages import CalibrationRequested, EngineFailed, TwinCalibrated
from tui.screens.modals import ReportScreen
from tui.state import AppState

if TYPE_CHECKING:
    from engine.results.store import Store

DEFAULT_BASE = "agx-orin-64gb"


class CalibrateActions(AppState):
    """Mixin of SlmDvfsApp."""

    def on_calibration_requested(self, message: CalibrationRequested) -> None:
        self.calibrate_twin()

    def calibrate_twin(self) -> None:
        store = self.store
        if self._refuse_if_busy() or store is None:
            return
        # The twin's own profile when the app runs on one; on a board, the shipped profile of its kind.
        base = getattr(self.identity, "profile", None) or DEFAULT_BASE
        self.engine_busy = "calibration"
        self.notify(f"calibrating {base} to this store's measured sweeps (with leave-one-sweep-out); "
                    "this takes a minute or so")
        self.calibrate_worker(store, base)

    @work(thread=True, exclusive=True, exit_on_error=False, group=ENGINE)
    def calibrate_worker(self, store: Store, base: str) -> None:
        from engine.run.calibrate import CalibrateSpec, run_calibration

        try:
            result = run_calibration(CalibrateSpec(twin=base), store=store)
        except BaseException as exc:  # noqa: BLE001 - shown in the app
            self.post_message(EngineFailed("calibration", exc))
            return
        self.post_message(TwinCalibrated(result))

    def on_twin_calibrated(self, message: TwinCalibrated) -> None:
        result = message.result
        self._engine_idle()
        self.push_screen(ReportScreen(f"Calibrated profile {result.profile_name}", result.report_text()))
        self.notify(result.summary_line(), title="Twin calibrated", timeout=12)

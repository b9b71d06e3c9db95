"""Calibrating the twin from the app: the Sweep page's `c` fits the twin's profile to the store's
measured sweeps (engine.run.calibrate, as `slm-dvfs calibrate` does) and shows the fit report."""

from __future__ import annotations

from typing import Any

from textual import work

from tui.actions.experiments import ENGINE
from tui.messages import EngineFailed, TwinCalibrated
from tui.screens.modals import ReportScreen

DEFAULT_BASE = "agx-orin-64gb"


class CalibrateActions:
    """Mixin of SlmDvfsApp."""

    def calibrate_twin(self) -> None:
        if self._refuse_if_busy() or self.store is None:  # type: ignore[attr-defined]
            return
        # The twin's own profile when the app runs on one; on a board, the shipped profile of its kind.
        base = getattr(self.identity, "profile", None) or DEFAULT_BASE  # type: ignore[attr-defined]
        self.engine_busy = "calibration"
        self.notify(f"calibrating {base} to this store's measured sweeps (with leave-one-sweep-out); "  # type: ignore[attr-defined]
                    "this takes a minute or so")
        self.calibrate_worker(base)

    @work(thread=True, exclusive=True, exit_on_error=False, group=ENGINE)
    def calibrate_worker(self, base: str) -> None:
        from engine.run.calibrate import CalibrateSpec, run_calibration

        try:
            result = run_calibration(CalibrateSpec(twin=base), store=self.store)  # type: ignore[attr-defined]
        except BaseException as exc:  # noqa: BLE001 - shown in the app
            self.post_message(EngineFailed("calibration", exc))  # type: ignore[attr-defined]
            return
        self.post_message(TwinCalibrated(result))  # type: ignore[attr-defined]

    def on_twin_calibrated(self, message: TwinCalibrated) -> None:
        result: Any = message.result
        self._engine_idle()  # type: ignore[attr-defined]
        self.push_screen(ReportScreen(f"Calibrated profile {result.profile_name}", result.report_text()))  # type: ignore[attr-defined]
        self.notify(result.summary_line(), title="Twin calibrated", timeout=12)  # type: ignore[attr-defined]

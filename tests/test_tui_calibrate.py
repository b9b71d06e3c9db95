"""The Sweep page's Calibrate action: the twin's profile fitted to the store's measured sweeps
(synthetic: a perturbed twin's figures), the fit report shown, the profile written; and the
refusal on a store without measured sweeps."""

from __future__ import annotations

from typing import Any

from engine.device.session import DeviceSession
from engine.device.twin.profile import load_profile, user_profiles_dir
from engine.results.store import Store
from test_calibrate_cmd import SMALL, SMALL_QNLI, store_sweep
from tui.messages import EngineFailed, TwinCalibrated
from tui.screens.modals import ReportScreen
from tui_helpers import drive, make_app


async def test_calibrate_on_the_sweep_page_shows_the_fit_and_writes_the_profile(
        twin_session: DeviceSession, results_store: Store, isolated_env: Any) -> None:
    store_sweep(results_store, SMALL)
    store_sweep(results_store, SMALL_QNLI)
    app = make_app(twin_session, store=results_store)
    async with drive(app, size=(100, 30)) as ui:
        await ui.press("6", "c")
        done = await ui.wait_for(TwinCalibrated, timeout=240)
        assert isinstance(done, TwinCalibrated) and app.engine_busy is None
        await ui.until(lambda: isinstance(app.screen, ReportScreen), "the fit report is shown")
        text = app.screen.text
        for part in ("Leave-one-sweep-out", "energy MAPE", "[measured]", "--twin agx-orin-64gb-calibrated"):
            assert part in text, part
        await ui.press("escape")
        assert app.screen.PAGE == "sweep"
    calibrated = load_profile("agx-orin-64gb-calibrated")
    assert calibrated.base == "agx-orin-64gb"
    assert (user_profiles_dir() / "agx-orin-64gb-calibrated-report.md").is_file()


async def test_calibrate_without_measured_sweeps_says_how_to_get_them(
        twin_session: DeviceSession, results_store: Store, isolated_env: Any) -> None:
    app = make_app(twin_session, store=results_store)
    async with drive(app) as ui:
        await ui.press("6", "c")
        failed = await ui.wait_for(EngineFailed)
        assert isinstance(failed, EngineFailed) and failed.what == "calibration"
        assert app.engine_busy is None
        assert "import-sweep" in failed.error.remedy
    assert not user_profiles_dir().exists() or not any(user_profiles_dir().iterdir())

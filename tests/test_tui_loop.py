"""The TUI keeps a stored sweep's training loop: a lean-loop sweep opened from History is shown as one,
and `s` resumes that very sweep (not an hf sweep of the same shape)."""

from __future__ import annotations

import pytest

from engine.device.session import DeviceSession
from engine.results.store import Store
from engine.workload.spec import WorkloadSpec
from test_tui_flow import env  # noqa: F401 - the flow tests' isolation and frozen trace
from test_tui_text import cancel_after, open_from_history
from tui.screens.sweep import SweepScreen
from tui_helpers import drive, make_app, plain


@pytest.mark.slow  # traces bert-tiny at batch 8, length 32 and runs a sweep (~10 s)
async def test_an_opened_lean_sweep_says_its_loop_and_resumes_as_lean(
        twin_session: DeviceSession, results_store: Store) -> None:
    from engine.run.sweep import SweepSpec, run_sweep
    from tui.messages import SweepDone

    spec = SweepSpec(WorkloadSpec("bert-tiny", "sst2", batch_size=8, seq_len=32, padding="max_length", loop="lean"),
                     fast=True, twin="agx-orin-64gb")
    run_sweep(spec, store=results_store, session=twin_session, control=cancel_after(2))
    (stored,) = results_store.list_sweeps()
    assert results_store.get_workload(stored.workload_id).loop == "lean"
    app = make_app(twin_session, store=results_store, poll=False)
    async with drive(app) as ui:
        await ui.press("5")  # History: only sweeps, so their table has the focus
        await open_from_history(ui, app, stored.id)
        page = app.screen
        assert isinstance(page, SweepScreen)
        await ui.footer()
        # the lean loop goes unsaid, as stored labels leave it; a Trainer-style loop's sweep says "hf loop"
        shown = plain(page.query_one("#sw-workload").content)
        assert "batch 8, seq 32, fp32, full, padded to 32" in shown and "hf loop" not in shown
        assert page.values()["workload"]["loop"] == "lean"
        await ui.press("s")
        done = await ui.wait_for(SweepDone)
        await ui.workers_done()
        assert done.result.sweep_id == stored.id and done.result.resumed == 2 and done.result.status == "finished"
        assert [sw.id for sw in results_store.list_sweeps()] == [stored.id]  # resumed: no hf sweep beside it
        await ui.press("q")

"""The TUI's device page on the twin, driven by keyboard through Textual's pilot."""

from __future__ import annotations

from engine.device.session import DeviceSession
from tui.messages import SnapshotTaken
from tui.widgets.device_panes import ClocksPane, IdentityBar, RailsPane
from tui_helpers import drive, make_app, plain


async def test_device_page_shows_twin_identity_rails_and_clocks(twin_session: DeviceSession) -> None:
    app = make_app(twin_session)
    async with drive(app) as ui:
        await ui.wait_for(SnapshotTaken)
        assert app.last_snapshot is not None
        ident = plain(app.screen.query_one(IdentityBar).content, width=120)
        assert "TWIN agx-orin-64gb" in ident and "MAXN" in ident
        text = plain(app.screen.query_one(RailsPane).content, width=120)
        assert "VDD_GPU_SOC" in text and "total" in text and "[twin]" in text
        clocks = plain(app.screen.query_one(ClocksPane).content, width=120)
        assert "1300.5" in clocks and "nvhost_podgov" in clocks
        await ui.press("q")
    assert app.return_code in (0, None)

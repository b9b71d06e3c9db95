"""The TUI's device page on the twin, driven by keyboard through Textual's pilot."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.device.session import open_device
from tui.app import SlmDvfsApp
from tui.widgets.device_panes import ClocksPane, IdentityBar, RailsPane


@pytest.fixture
def session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SLM_DVFS_STATE_DIR", str(tmp_path / "state"))
    with open_device(twin="agx-orin-64gb", realtime=False) as s:
        yield s


async def test_device_page_shows_twin_identity_rails_and_clocks(session) -> None:
    app = SlmDvfsApp(session, refresh_s=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        for _ in range(40):
            await pilot.pause(0.05)
            if app.last_snapshot is not None:
                break
        await pilot.pause(0.1)
        assert app.last_snapshot is not None
        ident = _plain(app.screen.query_one(IdentityBar))
        assert "TWIN agx-orin-64gb" in ident and "MAXN" in ident
        rails = app.screen.query_one(RailsPane)
        text = _plain(rails)
        assert "VDD_GPU_SOC" in text and "total" in text and "[twin]" in text
        clocks = _plain(app.screen.query_one(ClocksPane))
        assert "1300.5" in clocks and "nvhost_podgov" in clocks
        await pilot.press("q")
    assert app.return_code in (0, None)


def _plain(widget) -> str:
    from rich.console import Console

    console = Console(width=120, record=True)
    console.print(widget.content)
    return console.export_text()

"""The TUI's device page on the twin, driven by keyboard through Textual's pilot: identity,
a graph per rail, clocks and temperatures, and history that fills while the page is hidden."""

from __future__ import annotations

from engine.device.session import DeviceSession
from tui.live_model import rail_key, temp_key
from tui.messages import SnapshotTaken
from tui.widgets.charts import HistoryGraph
from tui.widgets.device_panes import ClocksPane, IdentityBar
from tui.widgets.live import GraphStack
from tui_helpers import drive, make_app, plain


def graph_text(graph: HistoryGraph) -> str:
    return plain(graph.render(), width=200)


async def test_device_page_shows_twin_identity_rails_and_clocks(twin_session: DeviceSession) -> None:
    app = make_app(twin_session)
    async with drive(app, size=(160, 45)) as ui:  # wide: the clocks' full table
        await ui.wait_for(SnapshotTaken)
        await ui.wait_for(SnapshotTaken)  # the page draws the reading after the one that made its graphs
        assert app.last_snapshot is not None
        ident = plain(app.screen.query_one(IdentityBar).content, width=120)
        assert "TWIN agx-orin-64gb" in ident and "MAXN" in ident
        power = app.screen.query_one("#dev-power", GraphStack)
        assert "[twin]" in str(power.border_title)
        names = [g.series_name for g in power.graphs.values()]
        assert names == ["GPU_SOC", "CPU_CV", "SYS_5V0", "VDDQ_VDD2", "total"]  # a graph per rail, and the total
        total = graph_text(power.graphs[rail_key("total")])
        assert "avg" in total and "pk" in total
        clocks = plain(app.screen.query_one(ClocksPane).content, width=120)
        assert "1300.5" in clocks and "nvhost_podgov" in clocks
        assert app.screen.query_one(ClocksPane).compact is False
        temps = app.screen.query_one("#dev-temp-graphs", GraphStack)
        assert temp_key("max") in temps.graphs
        await ui.press("q")
    assert app.return_code in (0, None)


async def test_history_keeps_filling_while_the_page_is_hidden(twin_session: DeviceSession) -> None:
    app = make_app(twin_session)
    async with drive(app) as ui:
        await ui.wait_for(SnapshotTaken)
        await ui.press("5")  # History: no device graphs on it
        before = app.device_history.readings
        await ui.wait_for(SnapshotTaken, until=lambda: app.device_history.readings >= before + 3)
        await ui.press("1")
        await ui.wait_for(SnapshotTaken)
        graph = app.screen.query_one("#dev-power", GraphStack).graphs[rail_key("total")]
        assert sum(v is not None for v in graph._values) >= before + 3  # the hidden page's readings are drawn
        await ui.press("q")


async def test_clock_names_stay_readable_at_80x24(twin_session: DeviceSession) -> None:
    """The compact clocks table gives way in the governor column, never in the names (was `G…  306`)."""
    app = make_app(twin_session)
    async with drive(app) as ui:
        await ui.wait_for(SnapshotTaken)
        for page in ("1", "3"):
            await ui.press(page)
            await ui.wait_for(SnapshotTaken)
            pane = app.screen.query_one(ClocksPane)
            assert pane.compact
            for width in (pane.content_size.width, 34, 30):  # and narrower than any 80-column pane
                lines = plain(pane.content, width=width).splitlines()
                assert [line.split()[0] for line in lines[:3]] == ["GPU", "CPU", "EMC"]
                assert "306" in lines[0].split()[1]
        await ui.press("q")

"""The slm-dvfs app. It polls the device in a thread worker and redraws at about 2 Hz,
so the UI itself does not distort the energy it shows."""

from __future__ import annotations

import time

from textual import work
from textual.app import App
from textual.binding import Binding
from textual.worker import get_current_worker

from engine.device.base import ClockDomain
from engine.device.session import DeviceSession
from engine.device.snapshot import take_snapshot
from engine.errors import SlmDvfsError
from tui.messages import PollFailed, SnapshotTaken
from tui.screens.device import DeviceScreen

REFRESH_S = 0.5


class SlmDvfsApp(App):
    CSS_PATH = "styles.tcss"
    TITLE = "slm-dvfs"
    BINDINGS = [
        Binding("1", "page('device')", "Device"),
        Binding("q", "quit", "Quit"),
    ]
    SCREENS = {"device": DeviceScreen}

    def __init__(self, session: DeviceSession, refresh_s: float = REFRESH_S) -> None:
        super().__init__()
        self.session = session
        self.refresh_s = refresh_s
        self.pinned_by_us = False  # set by screens that pin clocks under a guard
        self.last_snapshot = None
        self.clock_tables: dict[ClockDomain, tuple[int, ...]] = {}

    def on_mount(self) -> None:
        for domain in ClockDomain:
            try:
                self.clock_tables[domain] = self.session.device.clock_table(domain)
            except SlmDvfsError:
                pass  # the pane shows the domain's own error
        self.push_screen("device")
        self.poll_device()

    def action_page(self, name: str) -> None:
        self.switch_screen(name)

    @work(thread=True, exclusive=True, exit_on_error=False, group="poll")
    def poll_device(self) -> None:
        worker = get_current_worker()
        identity = self.session.device.identity()
        while not worker.is_cancelled:
            try:
                self.post_message(SnapshotTaken(take_snapshot(self.session.device, identity)))
            except Exception as exc:  # noqa: BLE001 - shown in the app, never a crash to the shell
                self.post_message(PollFailed(str(exc)))
            time.sleep(self.refresh_s)

    def on_snapshot_taken(self, message: SnapshotTaken) -> None:
        self.last_snapshot = message.snapshot
        screen = self.screen
        if isinstance(screen, DeviceScreen):
            screen.show(message.snapshot, self.pinned_by_us, self.session.notes, self.clock_tables)

    def on_poll_failed(self, message: PollFailed) -> None:
        self.notify(message.error, title="Cannot read the device", severity="error")

"""Messages the app's workers post to the UI thread."""

from __future__ import annotations

from textual.message import Message

from engine.device.snapshot import DeviceSnapshot


class SnapshotTaken(Message):
    """A fresh reading of the device, taken in the poll worker."""

    def __init__(self, snapshot: DeviceSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class PollFailed(Message):
    """The poll worker could not read the device at all."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error

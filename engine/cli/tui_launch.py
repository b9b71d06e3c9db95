"""`slm-dvfs` with no sub-command: the TUI, on the board or else on the twin."""

from __future__ import annotations

import argparse
import importlib

from engine.device.session import open_device
from engine.device.guard.notes import board_notes


def launch_tui(args: argparse.Namespace) -> int:
    # The app is imported by name so that engine/ never imports textual at module level.
    app_module = importlib.import_module("tui.app")
    # thermal: on the twin the TUI shows temperatures that move with the run (a board has its own)
    with open_device(fallback_to_twin=True, thermal=True) as session:
        # A dead run's clocks are recovered; a pin left in place, or a session running now, is mentioned.
        session.notes.extend(board_notes(session.device))
        app_module.SlmDvfsApp(session).run()
    return 0

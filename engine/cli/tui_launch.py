"""`slm-dvfs` with no sub-command: the TUI, on the board or else on the twin."""

from __future__ import annotations

import argparse
import importlib

from engine.device.session import open_device
from engine.device.guard.guard import recover_stale


def launch_tui(args: argparse.Namespace) -> int:
    restored = recover_stale()
    # The app is imported by name so that engine/ never imports textual at module level.
    app_module = importlib.import_module("tui.app")
    with open_device(fallback_to_twin=True) as session:
        for j in restored:
            session.notes.append(f"restored clocks left changed by process {j.pid}, which did not exit cleanly")
        app_module.SlmDvfsApp(session).run()
    return 0

"""`slm-dvfs` with no sub-command: the TUI, on the board or else on the twin (and a Ray fleet with
`--fleet ADDRESS` or `--fleet-twins N[:profile]`: page 7)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from engine.core.errors import ConfigError
from engine.device.session import open_device
from engine.device.guard.notes import board_notes


def fleet_twins(text: str | None) -> tuple[int | None, str | None]:
    """`--fleet-twins N[:profile]` -> (N, profile), as `fleet --twins` reads it; (None, None) without."""
    if not text:
        return None, None
    from engine.run.fleet.cluster import parse_twins  # here: `slm-dvfs --help` and the TUI's start stay light

    return parse_twins(text, flag="--fleet-twins")


def launch_tui(args: argparse.Namespace) -> int:
    twins, profile = fleet_twins(getattr(args, "fleet_twins", None))
    address = getattr(args, "fleet", None)
    if twins and address:
        raise ConfigError("--fleet and --fleet-twins both given", "connect to one fleet: an address or local twins")
    # The app is imported by name so that engine/ never imports textual at module level.
    app_module = importlib.import_module("tui.app")
    # thermal: on the twin the TUI shows temperatures that move with the run (a board has its own)
    with open_device(fallback_to_twin=True, thermal=True) as session:
        # A dead run's clocks are recovered; a pin left in place, or a session running now, is mentioned.
        session.notes.extend(board_notes(session.device))
        # Connecting (Ray starts in seconds) happens in the app's worker: the UI opens at once.
        app = app_module.SlmDvfsApp(session, fleet_address=address, fleet_twins=twins, fleet_profile=profile)
        try:
            app.run()
        finally:
            app.close_fleet()  # a local fleet's Ray stops with the app
    try:
        if app.terminal_lost is not None:
            raise OSError(app.terminal_lost)
        # What quitting stopped, and that its clocks are back: said on the page, and here to stay.
        for line in app.farewell():
            print(line, file=sys.stderr, flush=True)
    except OSError:  # the terminal is gone (a SIGHUP's hang-up the app did not write into)
        _terminal_gone()
    # An exception the app did not handle: Textual printed its traceback and set return_code 1 (the
    # clocks are restored all the same, above). Scripts and systemd see the failure in the exit status.
    return app.return_code or 0


def _terminal_gone() -> None:
    """The terminal hung up: nothing can be told on it. Its descriptors point at /dev/null, so that
    neither a late log line nor the interpreter's last flush fails on the dead terminal."""
    try:
        devnull = os.open(os.devnull, os.O_RDWR)
    except OSError:
        return
    for fd in (0, 1, 2):
        try:
            os.dup2(devnull, fd)
        except OSError:
            pass
    os.close(devnull)

"""jetson_clocks: pin CPU, GPU and EMC to the mode's maximum, and store/restore that state."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from engine.device.nvpmodel import run_tool
from engine.core.errors import DeviceError

log = logging.getLogger(__name__)

_TIMEOUT_S = 60.0
_MISSING = "install L4T's jetson_clocks (it ships with JetPack) or pass its path with --jetson-clocks"


def run(cmd: str, *, store: str | os.PathLike[str] | None = None) -> None:
    """`jetson_clocks` (after `jetson_clocks --store FILE` when `store` is given)."""
    if store is not None:
        store_state(cmd, store)
    log.info("running %s", cmd)
    run_tool([cmd], _TIMEOUT_S, missing_remedy=_MISSING)


def store_state(cmd: str, path: str | os.PathLike[str]) -> None:
    """`jetson_clocks --store FILE`: save the current clocks so they can be restored."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    run_tool([cmd, "--store", os.fspath(path)], _TIMEOUT_S, missing_remedy=_MISSING)


def restore(cmd: str, path: str | os.PathLike[str]) -> None:
    """`jetson_clocks --restore FILE`."""
    if not Path(path).is_file():
        raise DeviceError(
            f"no jetson_clocks state file at {path}",
            "restore from the file that `jetson_clocks --store` wrote (or switch nvpmodel mode to reset clocks)",
        )
    run_tool([cmd, "--restore", os.fspath(path)], _TIMEOUT_S, missing_remedy=_MISSING)


def show(cmd: str) -> str:
    """`jetson_clocks --show`: the tool's own report of the clocks."""
    return run_tool([cmd, "--show"], _TIMEOUT_S, missing_remedy=_MISSING)

"""Running L4T's `nvpmodel` and `jetson_clocks`: only from their fixed system paths.

Nothing executes a path it was handed (docs/security.md, "What is executed"): not a path from
a journal, a flag (`--sysfs-root DIR` never makes us run DIR/usr/sbin/nvpmodel) or the
environment. Three routes, chosen by the device root alone:

- the root is `/`: the tools at `/usr/sbin/nvpmodel` and `/usr/bin/jetson_clocks`;
- the root is a twin's tree or a test tree (its marker file, owned by us and writable by
  nobody else): the same tools' stand-ins called in-process (`engine.device.jetson.fake_l4t`);
- any other root (a board's tree mounted elsewhere, a copy): no tool at all; the power mode
  is read from nvpmodel's status file and switching is refused with a clear error.
"""

from __future__ import annotations

import io
import logging
import os
from pathlib import Path
from typing import Sequence

from engine.core.errors import DeviceError
from engine.device.jetson import fake_l4t
from engine.device.nvpmodel import parse_query, run_tool
from engine.device.sysfs import FAKE_L4T_MARKER
from engine.device.treefs import own_tree

log = logging.getLogger(__name__)

NVPMODEL = "/usr/sbin/nvpmodel"
JETSON_CLOCKS = "/usr/bin/jetson_clocks"
SYSTEM, IN_PROCESS, NONE = "system", "in-process", "none"

_QUERY_TIMEOUT_S = 30.0
_SWITCH_TIMEOUT_S = 120.0  # a mode switch may hot-plug CPUs and take a while
_JC_TIMEOUT_S = 60.0
_MISSING = {
    "nvpmodel": f"install L4T's nvpmodel at {NVPMODEL} (it ships with JetPack; a container may lack it)",
    "jetson_clocks": f"install L4T's jetson_clocks at {JETSON_CLOCKS} (it ships with JetPack)",
}


def route(root: str | os.PathLike[str]) -> str:
    """How this root's tools run: SYSTEM (root `/`), IN_PROCESS (a trusted twin or test tree) or NONE."""
    if Path(os.path.realpath(root)) == Path("/"):
        return SYSTEM
    return IN_PROCESS if own_tree(root) else NONE


def available(root: str | os.PathLike[str], tool: str) -> bool:
    """Whether `tool` ("nvpmodel" | "jetson_clocks") can run for this root."""
    r = route(root)
    if r == IN_PROCESS:
        return True
    if r == SYSTEM:
        path = NVPMODEL if tool == "nvpmodel" else JETSON_CLOCKS
        return os.path.isfile(path) and os.access(path, os.X_OK)
    return False


def run(root: str | os.PathLike[str], tool: str, args: Sequence[str], timeout_s: float,
        *, stdin: str | None = None) -> str:
    """Run `tool` with `args` for the device at `root`; every failure is a DeviceError."""
    r = route(root)
    shown = " ".join([tool, *args])
    if r == SYSTEM:
        path = NVPMODEL if tool == "nvpmodel" else JETSON_CLOCKS
        return run_tool([path, *args], timeout_s, stdin=stdin, missing_remedy=_MISSING[tool])
    if r == NONE:
        raise DeviceError(
            f"`{shown}` cannot run for the tree at {root}: slm-dvfs runs L4T's tools only from "
            f"{NVPMODEL} and {JETSON_CLOCKS} on a board at /, never from a tree it was handed",
            "run on the board itself (no --sysfs-root), or use the digital twin (--twin)",
        )
    main = fake_l4t.nvpmodel_main if tool == "nvpmodel" else fake_l4t.jetson_clocks_main
    out, err = io.StringIO(), io.StringIO()
    resolved = os.path.realpath(root)
    if (Path(resolved) / FAKE_L4T_MARKER).is_file():  # a test tree keeps a log of its tools' calls
        with open(Path(resolved) / f"{tool}.calls", "a") as fh:
            fh.write(" ".join(args) + "\n")
    code = main(resolved, list(args), out, err)
    if code != 0:
        msg = (err.getvalue().strip() or out.getvalue().strip())[:300] or f"exit {code}"
        raise DeviceError(f"`{shown}` failed (exit {code}): {msg}", "check the twin's tree, or recreate it")
    return out.getvalue()


# --- nvpmodel --------------------------------------------------------------------------------
def nvpmodel_query(root: str | os.PathLike[str]) -> tuple[int, str]:
    """The active mode as `nvpmodel -q` reports it: (id, name)."""
    return parse_query(run(root, "nvpmodel", ["-q"], _QUERY_TIMEOUT_S), "nvpmodel")


def nvpmodel_switch(root: str | os.PathLike[str], mode_id: int) -> None:
    """`nvpmodel -m ID`. nvpmodel may ask to reboot (a TPC_PG_MASK change): we answer no,
    so the switch never reboots the board behind the user's back."""
    run(root, "nvpmodel", ["-m", str(int(mode_id))], _SWITCH_TIMEOUT_S, stdin="no\n")


# --- jetson_clocks ---------------------------------------------------------------------------
def jetson_clocks(root: str | os.PathLike[str], *, store: str | os.PathLike[str] | None = None) -> None:
    """`jetson_clocks` (after `jetson_clocks --store FILE` when `store` is given)."""
    if store is not None:
        Path(store).parent.mkdir(parents=True, exist_ok=True)
        run(root, "jetson_clocks", ["--store", os.fspath(store)], _JC_TIMEOUT_S)
    run(root, "jetson_clocks", [], _JC_TIMEOUT_S)


def jetson_clocks_restore(root: str | os.PathLike[str], store: str | os.PathLike[str]) -> None:
    """`jetson_clocks --restore FILE`."""
    if not Path(store).is_file():
        raise DeviceError(
            f"no jetson_clocks state file at {store}",
            "restore from the file that `jetson_clocks --store` wrote (or switch nvpmodel mode to reset clocks)",
        )
    run(root, "jetson_clocks", ["--restore", os.fspath(store)], _JC_TIMEOUT_S)


def jetson_clocks_show(root: str | os.PathLike[str]) -> str:
    """`jetson_clocks --show`: the tool's own report of the clocks."""
    return run(root, "jetson_clocks", ["--show"], _JC_TIMEOUT_S)

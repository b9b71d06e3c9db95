"""The `slm-dvfs` command: a thin client of the engine.

Each sub-command lives in its own module exposing `register(subparsers)`, which adds a
parser whose `func` default takes the parsed args and returns an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
from typing import Sequence

from engine import __version__
from engine.core.errors import SlmDvfsError
from engine.core.text import clean_text

# Sub-command modules, in the order `--help` lists them.
COMMAND_MODULES = (
    "engine.cli.device_cmds",
    "engine.cli.finetune_cmd",
    "engine.cli.store_cmds",
    "engine.cli.sweeps_cmd",
    "engine.cli.compare_cmd",
    "engine.cli.import_sweep_cmd",
    "engine.cli.experiment_cmds",
    "engine.cli.selector_cmds",
    "engine.cli.calibrate_cmd",
    "engine.cli.clockd_cmd",
    "engine.cli.fleet_cmd",
)

log = logging.getLogger("slm_dvfs")


def build_parser(*, commands: bool = True) -> argparse.ArgumentParser:
    """The whole parser; with `commands=False` only the top-level options (what opening the TUI parses)."""
    parser = argparse.ArgumentParser(
        prog="slm-dvfs",
        description="Energy-optimal DVFS for fine-tuning small language models on Jetson. "
        "With no sub-command, opens the TUI (on the board, or the digital twin where there is none).",
    )
    parser.add_argument("--version", action="version", version=f"slm-dvfs {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail to stderr")
    # the TUI's fleet (page 7); the `fleet` sub-commands take their own --address / --twins
    parser.add_argument("--fleet", metavar="ADDRESS", help="TUI: connect to this Ray fleet (host:port; `auto` "
                        "or RAY_ADDRESS); its boards show on page 7 and the Sweep page sweeps on them")
    parser.add_argument("--fleet-twins", metavar="N[:PROFILE]", help="TUI: start a local fleet of N twins "
                        "(each its own root, lock and serial) for page 7")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES if commands else ():
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue  # a command module not yet present in this checkout
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_given = list(sys.argv[1:] if argv is None else argv)
    # `slm-dvfs` (or `slm-dvfs -v`) opens the TUI: the sub-commands' modules are not imported for it.
    parser = build_parser(commands=not _tui_only(args_given))
    try:
        args = parser.parse_args(args_given)
    except BrokenPipeError:  # `slm-dvfs --help | head`
        return _stdout_gone()
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    from engine.selector.persistence import trust_explicit_paths

    trust_explicit_paths(bool(getattr(args, "trust", False)))  # `--trust`: a selector path the user vouches for
    func = getattr(args, "func", None)
    if func is None:
        from engine.cli.tui_launch import launch_tui

        func = launch_tui
    try:
        code = int(func(args) or 0)
        sys.stdout.flush()  # a reader that went away shows up here, not at interpreter exit
        return code
    except BrokenPipeError:
        return _stdout_gone()
    except SlmDvfsError as exc:
        print(f"slm-dvfs: error: {clean_text(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("slm-dvfs: interrupted", file=sys.stderr)
        return 130


def _tui_only(args: Sequence[str]) -> bool:
    """Only the TUI's options (-v, --fleet ADDRESS, --fleet-twins N): no sub-command to import."""
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg in ("--fleet", "--fleet-twins"):
            if not rest:
                return False  # argparse says what is missing
            rest.pop(0)
        elif arg not in ("-v", "--verbose") and not arg.startswith(("--fleet=", "--fleet-twins=")):
            return False
    return True


def _stdout_gone() -> int:
    """The reader of stdout closed it (`slm-dvfs runs | head`): stop quietly, as a filter
    killed by SIGPIPE would (exit 141), with stdout pointed at /dev/null so the interpreter's
    final flush does not complain."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass  # stdout is not a real file (a test's capture): nothing will flush it at exit
    return 128 + signal.SIGPIPE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

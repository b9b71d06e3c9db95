"""`slm-dvfs clockd`: run the clock service, or install / uninstall its systemd unit and group."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from engine.cli.numbers import int_range, seconds
from engine.core import paths
from engine.core.errors import ConfigError, DeviceError
from engine.core.text import shown

if TYPE_CHECKING:
    from engine.device.base import Device

log = logging.getLogger(__name__)


def _mode(text: str) -> int:
    # Octal digits only: int(text, 8) would also read `6_60` and other scripts' digits.
    if not re.fullmatch(r"0?[0-7]{1,3}", text.strip(), re.ASCII):
        raise argparse.ArgumentTypeError(f"{shown(text)!r} is not an octal mode (e.g. 0660)")
    mode = int(text.strip(), 8)
    if mode & ~0o666:
        raise argparse.ArgumentTypeError(f"{text} sets more than read/write bits")
    return mode


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from engine.device.clockd.framing import DEFAULT_IDLE_TIMEOUT_S
    from engine.device.clockd.server import DEFAULT_GROUP, DEFAULT_MAX_CONNECTIONS, DEFAULT_SOCKET, DEFAULT_STATE_DIR

    p = sub.add_parser("clockd", help="the clock service: the one root process that writes clocks (see docs/security.md)",
                       description="Run the clock service (as root, normally from its systemd unit), or set it up "
                                   "with --install / remove it with --uninstall.")
    p.add_argument("--socket", type=Path, default=DEFAULT_SOCKET, help=f"Unix socket to serve (default {DEFAULT_SOCKET})")
    p.add_argument("--group", default=DEFAULT_GROUP, help=f"group allowed to use it (default {DEFAULT_GROUP})")
    p.add_argument("--socket-mode", type=_mode, default=0o660, help="socket permissions, octal (default 0660)")
    p.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR,
                   help=f"its journals and jetson_clocks' store (default {DEFAULT_STATE_DIR})")
    p.add_argument("--idle-timeout", type=seconds, default=DEFAULT_IDLE_TIMEOUT_S, metavar="SECONDS",
                   help="drop a client that sends no request this long after connecting, or stops this long in "
                        f"the middle of one, restoring what it held (default {DEFAULT_IDLE_TIMEOUT_S:g})")
    p.add_argument("--max-connections", type=int_range(1, 4096), default=DEFAULT_MAX_CONNECTIONS, metavar="N",
                   help=f"connections one user may hold open at once (default {DEFAULT_MAX_CONNECTIONS})")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--sysfs-root", metavar="DIR", help="serve the board under DIR (tests; default /)")
    where.add_argument("--twin", metavar="PROFILE", help="serve a digital twin (tests)")
    action = p.add_mutually_exclusive_group()
    action.add_argument("--install", action="store_true", help="create the group and install the systemd unit")
    action.add_argument("--uninstall", action="store_true", help="remove the systemd unit and the group")
    p.add_argument("--prefix", type=Path, help="install under DIR instead of / (DIR/etc/systemd/system)")
    p.set_defaults(func=cmd_clockd)


def cmd_clockd(args: argparse.Namespace) -> int:
    from engine.device.clockd import install

    if args.install:
        for line in install.install(args.group, args.prefix):
            print(line)
        print("\nRemaining steps:")
        for step in install.next_steps(args.group):
            print(f"  {step}")
        return 0
    if args.uninstall:
        print("stop the service first if it runs: `sudo systemctl disable --now slm-dvfs-clockd`")
        for line in install.uninstall(args.group, args.prefix):
            print(line)
        return 0
    if args.prefix is not None:
        raise ConfigError("--prefix only applies to --install and --uninstall", "drop --prefix")
    if os.geteuid() != 0:
        raise ConfigError("the clock service runs as root (it is the one process that writes clocks)",
                          "start it with `sudo systemctl start slm-dvfs-clockd` (set up once with "
                          "`sudo slm-dvfs clockd --install`)")
    return _serve(args)


@contextlib.contextmanager
def _device(args: argparse.Namespace) -> Iterator[Device]:
    if args.twin:
        from engine.device.session import open_device

        with open_device(twin=args.twin) as session:
            yield session.device
        return
    from engine.device.jetson import JetsonDevice
    from engine.device.session import board_present

    root = paths.sysfs_root(args.sysfs_root)
    if not board_present(root):
        raise DeviceError(f"no Jetson GPU clock node found under {root}",
                          "run the clock service on the Jetson itself (or pass --sysfs-root DIR)")
    yield JetsonDevice(root)  # direct writes: the service is the writer


def _serve(args: argparse.Namespace) -> int:
    from engine.device.clockd.listener import CLEAN_STOP, serve
    from engine.device.clockd.server import ClockService

    if not logging.getLogger().handlers or logging.getLogger().level > logging.INFO:
        logging.getLogger("engine").setLevel(logging.INFO)  # the service's log is its audit trail
    with _device(args) as device, service_state_dir(args.state_dir):
        service = ClockService(device, group=args.group, state_dir=args.state_dir,
                               idle_timeout_s=args.idle_timeout, max_connections=args.max_connections)
        signum = serve(service, args.socket, mode=args.socket_mode,
                       ready=lambda path: print(f"slm-dvfs clockd: serving {device.describe().get('root')} on "
                                                f"{path} (group {args.group})", file=sys.stderr, flush=True))
    # A stop asked for (systemctl stop, Ctrl-C) is a success; any other signal is reported as the
    # shell would (128+N), which systemd's Restart=on-failure answers by starting the service again.
    return 0 if signum in CLEAN_STOP else 128 + signum


@contextlib.contextmanager
def service_state_dir(state_dir: Path) -> Iterator[Path]:
    """Make the service's --state-dir this process's state dir (`paths.state_dir()`) while it
    serves: its session lock lives there (not under root's home, which the unit's ProtectHome
    hides), and the guard trusts a jetson_clocks store only there. Set after a twin is opened,
    whose tree stays in the caller's state dir."""
    state_dir = Path(os.path.abspath(state_dir))
    old = os.environ.get(paths.ENV_PREFIX + "STATE_DIR")
    os.environ[paths.ENV_PREFIX + "STATE_DIR"] = str(state_dir)
    try:
        yield state_dir
    finally:
        if old is None:
            os.environ.pop(paths.ENV_PREFIX + "STATE_DIR", None)
        else:
            os.environ[paths.ENV_PREFIX + "STATE_DIR"] = old
